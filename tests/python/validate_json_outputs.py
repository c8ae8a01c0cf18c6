"""Validates constrained outputs against their JSON schemas with the `jsonschema` package.

Reads a JSON array of {"schema": ..., "output": "..."} from the file named by argv[1]; prints
one line per invalid output and exits 1 if there was any, else prints the count checked.
"""

import json
import sys

import jsonschema


def main() -> int:
    with open(sys.argv[1], encoding="utf-8") as f:
        cases = json.load(f)
    bad = 0
    for i, case in enumerate(cases):
        try:
            value = json.loads(case["output"])
            jsonschema.validate(value, case["schema"], cls=jsonschema.Draft202012Validator)
        except (ValueError, jsonschema.ValidationError) as e:
            bad += 1
            print(f"case {i}: {e!s:.300}\n  output: {case['output']!r:.300}")
    print(f"checked {len(cases)}, invalid {bad}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
