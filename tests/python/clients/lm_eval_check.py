"""lm-eval 0.4.13 against kiln with a tiny local task: loglikelihood (multiple choice, read
through `echo` + `logprobs`, tokenized by the server's /tokenizer_info and /tokenize) and
generation through `local-completions`, generation through `local-chat-completions`."""

import json
import os
import tempfile

from lm_eval import simple_evaluate
from lm_eval.tasks import TaskManager

from common import BASE_URL, MODEL

ROWS = [
    {"question": "The capital of France is", "choices": [" Paris", " London", " Rome"], "answer": 0, "target": "Paris"},
    {"question": "Two plus two is", "choices": [" four", " seven", " nine"], "answer": 0, "target": "four"},
    {"question": "The sky on a clear day is", "choices": [" blue", " green", " red"], "answer": 0, "target": "blue"},
]
folder = tempfile.mkdtemp()
data = os.path.join(folder, "data.jsonl")
with open(data, "w") as f:
    for row in ROWS:
        f.write(json.dumps(row) + "\n")
dataset = f"dataset_path: json\ndataset_kwargs:\n  data_files:\n    test: {data}\ntest_split: test\n"
with open(os.path.join(folder, "kiln_choice.yaml"), "w") as f:
    f.write(
        "task: kiln_choice\n" + dataset + "output_type: multiple_choice\n"
        'doc_to_text: "{{question}}"\ndoc_to_choice: "{{choices}}"\ndoc_to_target: "{{answer}}"\n'
        "metric_list:\n  - metric: acc\n"
    )
with open(os.path.join(folder, "kiln_generate.yaml"), "w") as f:
    f.write(
        "task: kiln_generate\n" + dataset + "output_type: generate_until\n"
        'doc_to_text: "Q: {{question}}\\nA:"\ndoc_to_target: "{{target}}"\n'
        "generation_kwargs:\n  until: [\"\\n\"]\n  max_gen_toks: 8\n  do_sample: false\n"
        "metric_list:\n  - metric: exact_match\n"
    )
tasks = TaskManager(include_path=folder)


def run(model, endpoint, names, **kwargs):
    results = simple_evaluate(
        model=model,
        model_args=f"model={MODEL},base_url={BASE_URL}/{endpoint},num_concurrent=1,max_retries=1",
        tasks=names,
        task_manager=tasks,
        log_samples=True,
        **kwargs,
    )
    for name in names:
        samples = results["samples"][name]
        assert len(samples) == len(ROWS), (name, samples)
        metrics = {k: v for k, v in results["results"][name].items() if "," in k and "stderr" not in k}
        assert metrics and all(0.0 <= v <= 1.0 for v in metrics.values()), (name, metrics)
    return results


completions = run("local-completions", "completions", ["kiln_choice", "kiln_generate"])
for sample in completions["samples"]["kiln_choice"]:
    # One finite loglikelihood per choice, read from the prompt's echoed logprobs.
    scores = [r[0][0] for r in sample["resps"]]
    assert len(scores) == 3 and all(s < 0 for s in scores), sample["resps"]
run("local-chat-completions", "chat/completions", ["kiln_generate"], apply_chat_template=True)
print("lm-eval checks passed")
