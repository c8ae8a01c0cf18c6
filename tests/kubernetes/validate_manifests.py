"""Validates kiln's Kubernetes manifests offline, as strictly as the tools allow.

- Core kinds (Deployment, Service, PodDisruptionBudget): `kubernetes-validate` in strict mode
  (unknown fields are errors) against the Kubernetes version given.
- PodMonitor and ScaledObject: the npm packages' compiled CRD validators, run by Node
  (tests/kubernetes/validate_custom_resources.mjs, vendored under tests/data/npm).
- InferencePool: the Gateway API Inference Extension's CRD (tests/data/...), its v1
  openAPIV3Schema with unknown fields rejected, plus the CRD's two CEL rules.
- The router's Deployment (router.yaml, vllm-router): discovers the pods of kiln's Deployment
  (its selector and port), reads /get_load through a load policy, and is probed on the
  router's own /liveness and /readiness; its Role grants reading pods and no more.
- The Deployment against kiln's drain: terminationGracePeriodSeconds covers preStop, the
  grace period and kiln's flush; readiness on /ready, liveness on /live (/health is 503 while
  the model loads, so a liveness probe on it would kill a pod with a large model), startup on
  /health; the model given as a file.

Usage: validate_manifests.py --node NODE --grace-s 30 --flush-s 3 FILE...
Prints one line per document and exits 1 if any fails.
"""

import argparse
import copy
import json
import pathlib
import subprocess
import sys

import jsonschema
import kubernetes_validate
import yaml

HERE = pathlib.Path(__file__).resolve().parent
CRD = HERE.parent / "data" / "gateway-api-inference-extension" / "inference.networking.k8s.io_inferencepools.yaml"
NODE_VALIDATOR = HERE / "validate_custom_resources.mjs"
KUBERNETES_VERSION = "1.37.0"
CORE_KINDS = {
    ("apps/v1", "Deployment"),
    ("v1", "Service"),
    ("policy/v1", "PodDisruptionBudget"),
    ("v1", "ServiceAccount"),
    ("rbac.authorization.k8s.io/v1", "Role"),
    ("rbac.authorization.k8s.io/v1", "RoleBinding"),
}
NODE_KINDS = {("monitoring.coreos.com/v1", "PodMonitor"), ("keda.sh/v1alpha1", "ScaledObject")}
# The CEL rules of the CRD, checked by hand below; a CRD with other rules fails the run so a
# new rule is never silently skipped.
CEL_RULES = {
    "self.kind != 'Service' || has(self.port)",
    "self.all(p1, self.exists_one(p2, p1.number==p2.number))",
}


def strict(schema):
    """A copy of an OpenAPI v3 structural schema that rejects unknown fields."""
    schema = copy.deepcopy(schema)

    def walk(node):
        if isinstance(node, dict):
            if "properties" in node and "additionalProperties" not in node and not node.get(
                "x-kubernetes-preserve-unknown-fields"
            ):
                node["additionalProperties"] = False
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(schema)
    return schema


def cel_rules(node):
    found = set()
    if isinstance(node, dict):
        for rule in node.get("x-kubernetes-validations", []):
            found.add(rule["rule"])
        for value in node.values():
            found |= cel_rules(value)
    elif isinstance(node, list):
        for value in node:
            found |= cel_rules(value)
    return found


def inference_pool_errors(doc):
    crd = yaml.safe_load(CRD.read_text())
    version = next(v for v in crd["spec"]["versions"] if v["name"] == doc["apiVersion"].split("/")[1])
    schema = version["schema"]["openAPIV3Schema"]
    rules = cel_rules(schema)
    if rules != CEL_RULES:
        return [f"the CRD's CEL rules changed: {sorted(rules ^ CEL_RULES)}"]
    # metadata is the API server's ObjectMeta, not described by the CRD.
    body = {k: v for k, v in doc.items() if k != "metadata"}
    validator = jsonschema.Draft7Validator(strict(schema))
    errors = [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(body)]
    spec = doc.get("spec", {})
    picker = spec.get("endpointPickerRef")
    if picker is not None and picker.get("kind", "Service") == "Service" and "port" not in picker:
        errors.append("endpointPickerRef: port is required when kind is 'Service' or unspecified")
    numbers = [p.get("number") for p in spec.get("targetPorts", [])]
    if len(numbers) != len(set(numbers)):
        errors.append("targetPorts: port number must be unique")
    return errors


def drain_errors(doc, grace_s, flush_s):
    """The Deployment's probes, drain timing and model source against kiln's behaviour."""
    errors = []
    pod = doc["spec"]["template"]["spec"]
    if pod.get("initContainers"):
        errors.append("init containers: the model must come from the image or a volume")
    (kiln,) = [c for c in pod["containers"] if c["name"] == "kiln"]
    args = kiln.get("args", [])
    if not any(a.startswith("--model=") for a in args):
        errors.append("kiln has no --model=FILE: it would fetch the default model at start")
    grace = next((float(a.split("=", 1)[1]) for a in args if a.startswith("--shutdown-grace-period=")), grace_s)
    pre_stop = kiln.get("lifecycle", {}).get("preStop", {}).get("sleep", {}).get("seconds", 0)
    needed = pre_stop + grace + flush_s
    period = pod.get("terminationGracePeriodSeconds", 30)
    if period < needed:
        errors.append(f"terminationGracePeriodSeconds {period} < preStop {pre_stop} + grace {grace} + flush {flush_s}")
    if kiln.get("readinessProbe", {}).get("httpGet", {}).get("path") != "/ready":
        errors.append("readiness probe is not GET /ready")
    if kiln.get("livenessProbe", {}).get("httpGet", {}).get("path") != "/live":
        errors.append("liveness probe is not GET /live")
    if kiln.get("startupProbe", {}).get("httpGet", {}).get("path") != "/health":
        errors.append("startup probe is not GET /health (started = the model loaded)")
    ports = {p["name"]: p["containerPort"] for p in kiln.get("ports", [])}
    listen = next((a.split("=", 1)[1] for a in args if a.startswith("--metrics-listen=")), None)
    if "metrics" not in ports or listen is None or not listen.endswith(f":{ports['metrics']}"):
        errors.append("the metrics port does not match --metrics-listen")
    if not kiln.get("resources", {}).get("requests"):
        errors.append("kiln has no resource requests")
    return errors


def router_errors(doc, kiln):
    """vllm-router's Deployment against kiln's: it discovers kiln's pods on kiln's port."""
    errors = []
    pod = doc["spec"]["template"]["spec"]
    (router,) = [c for c in pod["containers"] if c["name"] == "router"]
    args = router.get("args", [])
    if "--service-discovery" not in args:
        errors.append("the router does not discover the replicas (--service-discovery)")
    at = args.index("--selector") + 1 if "--selector" in args else len(args)
    selector = dict(a.split("=", 1) for a in args[at:] if not a.startswith("--"))
    if kiln is None:
        errors.append("no kiln Deployment among the files to check the router against")
    else:
        labels = kiln["spec"]["template"]["metadata"]["labels"]
        if not selector or any(labels.get(k) != v for k, v in selector.items()):
            errors.append(f"--selector {selector} does not select kiln's pods {labels}")
        (server,) = [c for c in kiln["spec"]["template"]["spec"]["containers"] if c["name"] == "kiln"]
        http = next(p["containerPort"] for p in server["ports"] if p["name"] == "http")
        if f"--service-discovery-port={http}" not in args:
            errors.append(f"--service-discovery-port is not kiln's http port {http}")
    if router.get("livenessProbe", {}).get("httpGet", {}).get("path") != "/liveness":
        errors.append("the router's liveness probe is not GET /liveness")
    if router.get("readinessProbe", {}).get("httpGet", {}).get("path") != "/readiness":
        errors.append("the router's readiness probe is not GET /readiness")
    if pod.get("serviceAccountName") is None:
        errors.append("the router has no service account to watch pods with")
    return errors


def role_errors(doc):
    """Service discovery reads pods; the Role grants that and nothing more."""
    wanted = [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}]
    return [] if doc.get("rules") == wanted else [f"rules {doc.get('rules')} are not read-only pods"]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--node", required=True)
    parser.add_argument("--grace-s", type=float, required=True)
    parser.add_argument("--flush-s", type=float, required=True)
    parser.add_argument("files", nargs="+")
    args = parser.parse_args()

    failed = 0
    node_docs = []
    docs = [
        (path, doc)
        for path in args.files
        for doc in yaml.safe_load_all(pathlib.Path(path).read_text())
        if doc is not None
    ]
    kiln = next(
        (
            doc
            for _, doc in docs
            if doc.get("kind") == "Deployment"
            and any(c["name"] == "kiln" for c in doc["spec"]["template"]["spec"]["containers"])
        ),
        None,
    )
    for path, doc in docs:
        key = (doc.get("apiVersion"), doc.get("kind"))
        name = f"{path}: {key[1]} {doc.get('metadata', {}).get('name')}"
        if key in NODE_KINDS:
            node_docs.append(doc)
            continue
        if key in CORE_KINDS:
            try:
                kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)
                errors = []
            except kubernetes_validate.ValidationError as e:
                errors = [str(e.message)]
            containers = doc.get("spec", {}).get("template", {}).get("spec", {}).get("containers", [])
            if key[1] == "Deployment" and not errors and any(c["name"] == "router" for c in containers):
                errors = router_errors(doc, kiln)
            elif key[1] == "Deployment" and not errors:
                errors = drain_errors(doc, args.grace_s, args.flush_s)
            elif key[1] == "Role" and not errors:
                errors = role_errors(doc)
        elif key == ("inference.networking.k8s.io/v1", "InferencePool"):
            errors = inference_pool_errors(doc)
        else:
            errors = ["no schema for this kind"]
        for error in errors:
            print(f"FAIL {name}: {error}")
        print(f"{'FAIL' if errors else 'ok'} {name}")
        failed += bool(errors)
    if node_docs:
        lines = "".join(json.dumps(d) + "\n" for d in node_docs)
        run = subprocess.run([args.node, str(NODE_VALIDATOR)], input=lines, text=True, capture_output=True)
        sys.stdout.write(run.stdout + run.stderr)
        failed += run.stdout.count("FAIL") or (run.returncode != 0)
    print(f"{failed} manifest(s) failed" if failed else "all manifests valid")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
