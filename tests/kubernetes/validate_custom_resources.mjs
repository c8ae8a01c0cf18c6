// Validates PodMonitor and ScaledObject documents (JSON, one per line on stdin) with the
// validators that the npm packages @kubernetes-models/prometheus-operator and
// @kubernetes-models/keda compile from those projects' CRD schemas, vendored under
// tests/data/npm (see SOURCES.md there). Prints one line per document; exits 1 if any fails.
import { readFileSync } from "node:fs";
import { PodMonitor } from "../data/npm/node_modules/@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1/PodMonitor.js";
import { ScaledObject } from "../data/npm/node_modules/@kubernetes-models/keda/keda.sh/v1alpha1/ScaledObject.js";

const models = {
  "monitoring.coreos.com/v1/PodMonitor": PodMonitor,
  "keda.sh/v1alpha1/ScaledObject": ScaledObject,
};

let failed = 0;
for (const line of readFileSync(0, "utf8").split("\n")) {
  if (!line.trim()) continue;
  const doc = JSON.parse(line);
  const key = `${doc.apiVersion}/${doc.kind}`;
  const Model = models[key];
  const name = `${key} ${doc.metadata?.name}`;
  if (!Model) {
    console.log(`FAIL ${name}: no schema for this kind`);
    failed++;
    continue;
  }
  try {
    new Model(doc).validate();
    console.log(`ok ${name}`);
  } catch (e) {
    console.log(`FAIL ${name}: ${e.message}`);
    failed++;
  }
}
process.exit(failed ? 1 : 0);
