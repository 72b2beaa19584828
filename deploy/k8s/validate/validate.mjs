#!/usr/bin/env node
// Validates the Kubernetes manifests of deploy/k8s the way the API server
// would, before a cluster sees them.
//
//   npm ci --prefix DIR   (with this folder's package.json and lock in DIR)
//   node deploy/k8s/validate/validate.mjs --prefix DIR [--root REPO]
//
// ctest runs both (tests/deploy: deploy_k8s_npm_ci, deploy_k8s_validate),
// with DIR in the build folder: node_modules never lands in the source tree,
// where `yamllint deploy/` would read its YAML.
//
// 1. kustomization.yaml: only the fields this file applies (resources,
//    images, namespace); every resource exists; every `images` entry
//    rewrites some container image, and every container image of the
//    kustomization is rewritten by one (a pod must not pull the bare name
//    `maxsimd` from a public registry). Images and namespace are applied as
//    kustomize applies them.
// 2. Every YAML document of deploy/k8s/*.yaml is validated with the
//    kubernetes-models class of its apiVersion and kind (the Kubernetes
//    OpenAPI schema; @kubernetes-models/prometheus-operator for the
//    PodMonitor): types, required fields, enums. The schemas allow unknown
//    fields, which the API server drops or refuses, so every field the
//    schema does not read is reported too. Ports must lie in 1..65535 and
//    port names be IANA service names.
// 3. The deployment's own rules, on the kustomized workloads: every
//    emptyDir has a sizeLimit; every container requests and limits
//    ephemeral-storage, the pod's limit covering its emptyDirs; a required
//    node affinity admits only GPUs of compute capability 8.0 or newer
//    (nvidia.com/gpu.compute.major); the nvidia.com/gpu taint is tolerated;
//    replicas spread over zones and nodes; a NetworkPolicy admits each
//    container port from named sources only, the gRPC port from pods
//    labelled maxsimd-client: "true".
// Exits 0 when all hold, 1 listing every problem, 2 on a usage error or
// missing modules.

import fs from "node:fs";
import path from "node:path";
import { createRequire } from "node:module";
import { fileURLToPath } from "node:url";

const HERE = path.dirname(fileURLToPath(import.meta.url));
const KUSTOMIZATION = "kustomization.yaml";
const KUSTOMIZE_FIELDS = new Set([
  "apiVersion", "kind", "resources", "images", "namespace"]);
const IMAGE_FIELDS = new Set(["name", "newName", "newTag", "digest"]);
const POD_SPEC_PATH = {
  Pod: ["spec"],
  Deployment: ["spec", "template", "spec"],
  StatefulSet: ["spec", "template", "spec"],
  DaemonSet: ["spec", "template", "spec"],
  ReplicaSet: ["spec", "template", "spec"],
  Job: ["spec", "template", "spec"],
  CronJob: ["spec", "jobTemplate", "spec", "template", "spec"],
};
const WORKLOADS = new Set(["Deployment", "StatefulSet", "DaemonSet"]);
const PORT_FIELDS = new Set([
  "port", "targetPort", "containerPort", "hostPort", "nodePort"]);
const GPU_MAJOR = "nvidia.com/gpu.compute.major";
const GPU_TAINT = "nvidia.com/gpu";
const MIN_GPU_MAJOR = 8;
const SPREAD_KEYS = ["topology.kubernetes.io/zone", "kubernetes.io/hostname"];
const CLIENT_LABEL = ["maxsimd-client", "true"];

class Problems {
  constructor() {
    this.list = [];
  }
  add(where, message) {
    this.list.push(`${where}: ${message}`);
  }
}

// -- Arguments and modules ----------------------------------------------------

function parseArgs(argv) {
  const args = { root: path.resolve(HERE, "..", "..", ".."), prefix: null };
  for (let i = 0; i < argv.length; i++) {
    const [flag, inline] = argv[i].split(/=(.*)/s, 2);
    const value = inline ?? argv[++i];
    if (value === undefined) throw new Error(`${flag} needs a value`);
    if (flag === "--root") args.root = path.resolve(value);
    else if (flag === "--prefix") args.prefix = path.resolve(value);
    else throw new Error(`unknown argument ${argv[i]}`);
  }
  if (!args.prefix) throw new Error("--prefix DIR (npm ci --prefix DIR) is required");
  return args;
}

// The packages installed by `npm ci --prefix DIR`; require() takes their
// CommonJS builds.
function loadModules(prefix) {
  const req = createRequire(path.join(prefix, "package.json"));
  const YAML = req("yaml");
  const models = new Map();
  function modelFor(apiVersion, kind) {
    const key = `${apiVersion}/${kind}`;
    if (!models.has(key)) {
      const candidates = [`kubernetes-models/${apiVersion}/${kind}`];
      if (apiVersion.startsWith("monitoring.coreos.com/")) {
        candidates.unshift(
          `@kubernetes-models/prometheus-operator/${apiVersion}/${kind}`);
      }
      let model = null;
      for (const c of candidates) {
        try {
          model = req(c)[kind] ?? null;
        } catch (e) {
          if (e.code !== "MODULE_NOT_FOUND" &&
              e.code !== "ERR_PACKAGE_PATH_NOT_EXPORTED") throw e;
        }
        if (model) break;
      }
      models.set(key, model);
    }
    return models.get(key);
  }
  return { YAML, modelFor };
}

// -- Schema -------------------------------------------------------------------

// Wraps `value` so that the fields a validator reads are recorded: a schema
// reads each property it declares (present or not) by name, and enumerates
// the keys of a map (labels, resources). An object whose validator read
// some of its fields, enumerated none, and holds others has unknown fields.
// An object read not at all is free-form (or not reached) and is skipped.
function track(value, where, records) {
  if (value === null || typeof value !== "object") return value;
  const record = { where, value, read: new Set(), enumerated: false };
  if (!Array.isArray(value)) records.push(record);
  const children = new Map();
  return new Proxy(value, {
    get(target, key, receiver) {
      const v = Reflect.get(target, key, receiver);
      if (typeof key !== "string") return v;
      record.read.add(key);
      if (v === null || typeof v !== "object") return v;
      if (!children.has(key)) {
        children.set(key, track(v, `${where}/${key}`, records));
      }
      return children.get(key);
    },
    ownKeys(target) {
      record.enumerated = true;
      return Reflect.ownKeys(target);
    },
  });
}

function validateSchema(Model, doc, where, problems) {
  const model = new Model(doc);
  const records = [];
  try {
    Model.prototype.validate.call(track(model, "", records));
  } catch (e) {
    for (const part of String(e.message).split(", data")) {
      problems.add(where, part.replace(/^data/, "").trim());
    }
  }
  for (const r of records) {
    if (r.enumerated || r.read.size === 0) continue;
    for (const key of Object.keys(r.value)) {
      if (!r.read.has(key)) {
        problems.add(where, `${r.where}/${key}: unknown field (the API ` +
                            `server drops or refuses it)`);
      }
    }
  }
}

const IANA_SVC_NAME = /^(?=.{1,15}$)(?=.*[a-z])[a-z0-9]+(-[a-z0-9]+)*$/;

function checkPorts(value, where, pointer, problems) {
  if (Array.isArray(value)) {
    value.forEach((v, i) => checkPorts(v, where, `${pointer}/${i}`, problems));
  } else if (value !== null && typeof value === "object") {
    for (const [key, v] of Object.entries(value)) {
      const at = `${pointer}/${key}`;
      if (PORT_FIELDS.has(key) && typeof v === "number" &&
          !(Number.isInteger(v) && v >= 1 && v <= 65535)) {
        problems.add(where, `${at}: port ${v} is not in 1..65535`);
      } else if (PORT_FIELDS.has(key) && typeof v === "string" &&
                 !IANA_SVC_NAME.test(v)) {
        problems.add(where, `${at}: port name ${JSON.stringify(v)} is not ` +
                            `an IANA service name (a-z, 0-9, -; 15 at most)`);
      } else {
        checkPorts(v, where, at, problems);
      }
    }
  }
}

// -- Kustomize ----------------------------------------------------------------

function splitImage(image) {
  let name = image;
  let digest = null;
  let tag = null;
  const at = name.indexOf("@");
  if (at >= 0) {
    digest = name.slice(at + 1);
    name = name.slice(0, at);
  }
  const colon = name.lastIndexOf(":");
  if (colon > name.lastIndexOf("/")) {
    tag = name.slice(colon + 1);
    name = name.slice(0, colon);
  }
  return { name, tag, digest };
}

// The pod template of a workload (or the spec of a Pod); null for others.
function podSpecOf(doc) {
  const keys = POD_SPEC_PATH[doc.kind];
  if (!keys) return null;
  let spec = doc;
  for (const key of keys) {
    spec = spec !== null && typeof spec === "object" ? spec[key] : undefined;
  }
  return spec !== null && typeof spec === "object" ? spec : null;
}

function containersOf(podSpec) {
  if (!podSpec) return [];
  return [...(podSpec.initContainers ?? []), ...(podSpec.containers ?? [])]
    .filter((c) => c && typeof c === "object");
}

function checkKustomization(k, where, dir, problems) {
  if (k === null || typeof k !== "object") {
    problems.add(where, "is not a mapping");
    return { resources: new Set(), images: [], namespace: null };
  }
  if (k.apiVersion !== "kustomize.config.k8s.io/v1beta1" ||
      k.kind !== "Kustomization") {
    problems.add(where, "is not apiVersion kustomize.config.k8s.io/v1beta1, " +
                        "kind Kustomization");
  }
  for (const key of Object.keys(k)) {
    if (!KUSTOMIZE_FIELDS.has(key)) {
      problems.add(where, `field ${key} is not applied by this validator: ` +
                          `teach deploy/k8s/validate/validate.mjs to apply ` +
                          `it`);
    }
  }
  const resources = new Set();
  for (const r of k.resources ?? []) {
    if (typeof r !== "string" || r.includes("/") ||
        !fs.existsSync(path.join(dir, r))) {
      problems.add(where, `resource ${JSON.stringify(r)} is not a file of ` +
                          `deploy/k8s`);
    } else {
      resources.add(r);
    }
  }
  const images = [];
  for (const [i, img] of (k.images ?? []).entries()) {
    if (!img || typeof img !== "object" || typeof img.name !== "string") {
      problems.add(where, `images[${i}] has no name`);
      continue;
    }
    for (const key of Object.keys(img)) {
      if (!IMAGE_FIELDS.has(key)) {
        problems.add(where, `images[${i}] (${img.name}): unknown field ${key}`);
      }
    }
    if (!img.newName && !img.newTag && !img.digest) {
      problems.add(where, `images[${i}] (${img.name}) sets no newName, ` +
                          `newTag or digest`);
    }
    images.push({ ...img, used: false });
  }
  if (k.namespace !== undefined && typeof k.namespace !== "string") {
    problems.add(where, "namespace is not a string");
  }
  return { resources, images, namespace: k.namespace ?? null };
}

// Applies `images` to every container, as kustomize's image transformer
// does: an entry matches an image by name, without tag or digest.
function applyImages(doc, images, where, problems) {
  for (const c of containersOf(podSpecOf(doc))) {
    if (typeof c.image !== "string" || c.image === "") {
      problems.add(where, `container ${c.name} has no image`);
      continue;
    }
    const img = splitImage(c.image);
    const entry = images.find((e) => e.name === img.name);
    if (!entry) {
      problems.add(where, `container ${c.name}: image ${c.image} is not ` +
                          `rewritten by kustomization.yaml images`);
      continue;
    }
    entry.used = true;
    const name = entry.newName ?? img.name;
    if (entry.digest) c.image = `${name}@${entry.digest}`;
    else if (entry.newTag) c.image = `${name}:${entry.newTag}`;
    else c.image = name + (img.digest ? `@${img.digest}` :
                           img.tag ? `:${img.tag}` : "");
  }
}

// -- The deployment's rules ---------------------------------------------------

const QUANTITY = /^([+-]?(?:\d+\.?\d*|\.\d+))(?:([eE][+-]?\d+)|(Ki|Mi|Gi|Ti|Pi|Ei|m|k|M|G|T|P|E))?$/;
const SUFFIX = {
  Ki: 2 ** 10, Mi: 2 ** 20, Gi: 2 ** 30, Ti: 2 ** 40, Pi: 2 ** 50,
  Ei: 2 ** 60, m: 1e-3, k: 1e3, M: 1e6, G: 1e9, T: 1e12, P: 1e15, E: 1e18,
};

function quantity(q) {
  const m = QUANTITY.exec(String(q));
  if (!m) return NaN;
  const base = Number(m[1]);
  if (m[2]) return base * 10 ** Number(m[2].slice(1));
  return base * (m[3] ? SUFFIX[m[3]] : 1);
}

function selects(matchLabels, labels) {
  const entries = Object.entries(matchLabels ?? {});
  return entries.length > 0 &&
         entries.every(([k, v]) => labels[k] === v);
}

function checkStorage(where, spec, problems) {
  let emptyDirBytes = 0;
  for (const v of spec.volumes ?? []) {
    if (!v.emptyDir) continue;
    if (v.emptyDir.sizeLimit === undefined) {
      problems.add(where, `emptyDir ${v.name} has no sizeLimit`);
    } else if (v.emptyDir.medium !== "Memory") {
      emptyDirBytes += quantity(v.emptyDir.sizeLimit);
    }
  }
  let limitBytes = 0;
  for (const c of containersOf(spec)) {
    const req = c.resources?.requests?.["ephemeral-storage"];
    const lim = c.resources?.limits?.["ephemeral-storage"];
    if (req === undefined || lim === undefined) {
      problems.add(where, `container ${c.name} has no ephemeral-storage ` +
                          `${req === undefined ? "request" : "limit"}`);
    }
    if (lim !== undefined && (spec.containers ?? []).includes(c)) {
      limitBytes += quantity(lim);
    }
  }
  if (limitBytes < emptyDirBytes) {
    problems.add(where, `the containers' ephemeral-storage limits ` +
                        `(${limitBytes / 2 ** 30} GiB) are below the ` +
                        `emptyDirs' sizeLimits (${emptyDirBytes / 2 ** 30} ` +
                        `GiB)`);
  }
}

// Every term of a required node affinity (they are ORed) must admit only
// GPUs of compute capability MIN_GPU_MAJOR.0 or newer.
function checkPlacement(where, spec, problems) {
  const terms = spec.affinity?.nodeAffinity
    ?.requiredDuringSchedulingIgnoredDuringExecution?.nodeSelectorTerms ?? [];
  const admitsOnlySupported = (term) =>
    (term.matchExpressions ?? []).some((e) => e.key === GPU_MAJOR && (
      (e.operator === "In" && (e.values ?? []).length > 0 &&
       e.values.every((v) => Number(v) >= MIN_GPU_MAJOR)) ||
      (e.operator === "Gt" && (e.values ?? []).length === 1 &&
       Number(e.values[0]) >= MIN_GPU_MAJOR - 1)));
  if (terms.length === 0 || !terms.every(admitsOnlySupported)) {
    problems.add(where, `no required node affinity admitting only GPUs of ` +
                        `compute capability ${MIN_GPU_MAJOR}.0 or newer ` +
                        `(${GPU_MAJOR} Gt ${MIN_GPU_MAJOR - 1}, or In ` +
                        `majors >= ${MIN_GPU_MAJOR})`);
  }
  if (!(spec.tolerations ?? []).some((t) => t.key === GPU_TAINT)) {
    problems.add(where, `no toleration of the ${GPU_TAINT} taint`);
  }
}

function checkSpread(where, spec, labels, problems) {
  const constraints = spec.topologySpreadConstraints ?? [];
  for (const key of SPREAD_KEYS) {
    if (!constraints.some((c) => c.topologyKey === key &&
                                 selects(c.labelSelector?.matchLabels,
                                         labels))) {
      problems.add(where, `no topologySpreadConstraint over ${key} ` +
                          `selecting its own pods`);
    }
  }
}

function ruleAllows(rule, port) {
  return (rule.ports ?? []).some((p) =>
    p.port === port.containerPort || (port.name && p.port === port.name));
}

function checkNetworkPolicy(where, spec, labels, policies, problems) {
  const mine = policies.filter((np) =>
    selects(np.spec?.podSelector?.matchLabels, labels) &&
    (np.spec?.policyTypes ?? ["Ingress"]).includes("Ingress"));
  if (mine.length === 0) {
    problems.add(where, "no NetworkPolicy selects its pods");
    return;
  }
  const rules = mine.flatMap((np) => np.spec.ingress ?? []);
  for (const rule of rules) {
    if (!rule.from || rule.from.length === 0) {
      problems.add(where, `a NetworkPolicy rule admits every source (no ` +
                          `from): port(s) ${JSON.stringify(rule.ports)}`);
    }
  }
  for (const c of spec.containers ?? []) {
    for (const port of c.ports ?? []) {
      const allowing = rules.filter((r) => ruleAllows(r, port));
      if (allowing.length === 0) {
        problems.add(where, `no NetworkPolicy rule admits container ` +
                            `${c.name} port ${port.containerPort} ` +
                            `(${port.name})`);
      }
      if (port.name === "grpc" && !allowing.some((r) => (r.from ?? []).some(
        (peer) => !peer.namespaceSelector &&
                  peer.podSelector?.matchLabels?.[CLIENT_LABEL[0]] ===
                  CLIENT_LABEL[1]))) {
        problems.add(where, `no NetworkPolicy rule admits pods labelled ` +
                            `${CLIENT_LABEL[0]}: "${CLIENT_LABEL[1]}" to ` +
                            `the gRPC port ${port.containerPort}`);
      }
    }
  }
}

function checkWorkload(where, doc, policies, problems) {
  const spec = podSpecOf(doc);
  if (!spec) return;
  const labels = doc.spec?.template?.metadata?.labels ?? {};
  checkStorage(where, spec, problems);
  checkPlacement(where, spec, problems);
  checkSpread(where, spec, labels, problems);
  checkNetworkPolicy(where, spec, labels, policies, problems);
}

// -- Main ---------------------------------------------------------------------

function run(args) {
  const problems = new Problems();
  const { YAML, modelFor } = loadModules(args.prefix);
  const dir = path.join(args.root, "deploy", "k8s");
  const files = fs.readdirSync(dir).filter((f) => /\.ya?ml$/.test(f)).sort();

  const parse = (file) => {
    const text = fs.readFileSync(path.join(dir, file), "utf8");
    const docs = [];
    for (const d of YAML.parseAllDocuments(text)) {
      for (const e of d.errors) problems.add(file, `YAML: ${e.message}`);
      if (d.errors.length === 0) docs.push(d.toJS());
    }
    return docs.filter((d) => d !== null && d !== undefined);
  };

  let kustomization = { resources: new Set(), images: [], namespace: null };
  if (!files.includes(KUSTOMIZATION)) {
    problems.add(KUSTOMIZATION, "missing");
  } else {
    const docs = parse(KUSTOMIZATION);
    if (docs.length !== 1) {
      problems.add(KUSTOMIZATION, "must hold one document");
    } else {
      kustomization = checkKustomization(docs[0], KUSTOMIZATION, dir,
                                         problems);
    }
  }

  const all = [];
  for (const file of files) {
    if (file === KUSTOMIZATION) continue;
    const inKustomization = kustomization.resources.has(file);
    for (const [i, doc] of parse(file).entries()) {
      const kind = doc?.kind;
      const name = doc?.metadata?.name;
      const where = `${file} ${kind ?? `document ${i + 1}`}` +
                    (name ? ` ${name}` : "");
      if (typeof doc !== "object" || typeof doc.apiVersion !== "string" ||
          typeof kind !== "string") {
        problems.add(where, "no apiVersion and kind");
        continue;
      }
      const Model = modelFor(doc.apiVersion, kind);
      if (!Model) {
        problems.add(where, `no schema for ${doc.apiVersion} ${kind}`);
        continue;
      }
      if (inKustomization) {
        applyImages(doc, kustomization.images, where, problems);
        if (kustomization.namespace) {
          doc.metadata = { ...doc.metadata, namespace: kustomization.namespace };
        }
      } else if (containersOf(podSpecOf(doc)).length > 0) {
        problems.add(where, "has containers but is not a resource of " +
                            "kustomization.yaml, whose images it needs");
      }
      validateSchema(Model, doc, where, problems);
      checkPorts(doc, where, "", problems);
      all.push({ where, doc, inKustomization });
    }
  }
  for (const img of kustomization.images) {
    if (!img.used) {
      problems.add(KUSTOMIZATION, `images entry ${img.name} matches no ` +
                                  `container image of its resources`);
    }
  }
  const policies = all.filter((d) => d.inKustomization &&
                                     d.doc.kind === "NetworkPolicy")
    .map((d) => d.doc);
  const workloads = all.filter((d) => WORKLOADS.has(d.doc.kind));
  for (const { where, doc } of workloads) {
    checkWorkload(where, doc, policies, problems);
  }
  if (workloads.length === 0) problems.add("deploy/k8s", "no workload");

  const images = [...new Set(all.flatMap(({ doc }) =>
    containersOf(podSpecOf(doc)).map((c) => c.image)))];
  return { problems: problems.list, documents: all.length,
           files: files.length, workloads: workloads.length, images };
}

function main() {
  let args;
  try {
    args = parseArgs(process.argv.slice(2));
  } catch (e) {
    console.error(`validate: ${e.message}\nusage: validate.mjs --prefix DIR ` +
                  `[--root REPO]`);
    return 2;
  }
  let result;
  try {
    result = run(args);
  } catch (e) {
    if (e.code === "MODULE_NOT_FOUND") {
      console.error(`validate: ${e.message.split("\n")[0]}: run ` +
                    `npm ci --prefix ${args.prefix} with ` +
                    `deploy/k8s/validate/package.json and package-lock.json ` +
                    `there`);
      return 2;
    }
    console.error(`validate: cannot check: ${e.stack}`);
    return 2;
  }
  for (const p of result.problems) console.error(`validate: ${p}`);
  if (result.problems.length > 0) {
    console.error(`validate: FAILED: ${result.problems.length} problem(s)`);
    return 1;
  }
  console.log(`validate: OK: ${result.documents} documents in ` +
              `${result.files} files, ${result.workloads} workloads; ` +
              `images ${result.images.join(", ")}`);
  return 0;
}

process.exitCode = main();
