// Offline checks of rendered Kubernetes objects: each object against the Kubernetes OpenAPI
// schema of its kind (kubernetes-models, and the Prometheus Operator's for ServiceMonitor), and
// every pod template against the Pod Security Standards "restricted" profile.
// Usage: node check.js FILE.json (a JSON array of objects); prints one line per violation and
// exits 1 when there is any, 0 when all pass, 2 on bad input or an unknown kind.
import fs from "fs";

async function modelFor(apiVersion, kind) {
    const [group, version] = apiVersion.includes("/") ? apiVersion.split("/") : ["", apiVersion];
    const candidates = [];
    if (group === "monitoring.coreos.com")
        candidates.push(["@kubernetes-models/prometheus-operator", group, version]);
    else
        candidates.push(["kubernetes-models", group || "", version]);
    for (const [pkg, g, v] of candidates) {
        const dir = g ? `${pkg}/${g}/${v}` : `${pkg}/${v}`;
        try {
            const mod = await import(`${dir}/${kind}`);
            if (mod[kind])
                return mod[kind];
        } catch (e) {
            /* next */
        }
    }
    return null;
}

// ---- Pod Security Standards, "restricted" (which includes "baseline") -------------------
const ALLOWED_VOLUMES = ["configMap", "csi", "downwardAPI", "emptyDir", "ephemeral",
                         "persistentVolumeClaim", "projected", "secret"];
const SAFE_SYSCTLS = ["kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range",
                      "net.ipv4.ip_unprivileged_port_start", "net.ipv4.tcp_syncookies",
                      "net.ipv4.ping_group_range", "net.ipv4.ip_local_reserved_ports",
                      "net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_fin_timeout",
                      "net.ipv4.tcp_keepalive_intvl", "net.ipv4.tcp_keepalive_probes"];
const SELINUX_TYPES = ["", "container_t", "container_init_t", "container_kvm_t",
                       "container_engine_t"];

function podSpecOf(obj) {
    const s = obj.spec || {};
    switch (obj.kind) {
    case "Pod": return s;
    case "Deployment": case "StatefulSet": case "DaemonSet": case "ReplicaSet": case "Job":
        return (s.template || {}).spec;
    case "CronJob": return (((s.jobTemplate || {}).spec || {}).template || {}).spec;
    case "PyTorchJob": {
        const out = [];
        for (const r of Object.values(s.pytorchReplicaSpecs || {}))
            out.push(((r || {}).template || {}).spec);
        return out;
    }
    default: return null;
    }
}

function restricted(spec, where, out) {
    const bad = (msg) => out.push(`${where}: Pod Security restricted: ${msg}`);
    const psc = spec.securityContext || {};
    if (spec.hostNetwork) bad("hostNetwork");
    if (spec.hostPID) bad("hostPID");
    if (spec.hostIPC) bad("hostIPC");
    for (const v of spec.volumes || []) {
        const type = Object.keys(v).find((k) => k !== "name");
        if (!ALLOWED_VOLUMES.includes(type)) bad(`volume ${v.name} of type ${type}`);
    }
    for (const s of psc.sysctls || [])
        if (!SAFE_SYSCTLS.includes(s.name)) bad(`unsafe sysctl ${s.name}`);
    const seLinux = (sc, who) => {
        const o = sc.seLinuxOptions;
        if (!o) return;
        if (!SELINUX_TYPES.includes(o.type || "")) bad(`${who}: seLinuxOptions.type ${o.type}`);
        if (o.user || o.role) bad(`${who}: seLinuxOptions user/role set`);
    };
    seLinux(psc, "pod");
    const podSeccomp = (psc.seccompProfile || {}).type;
    if (podSeccomp === "Unconfined") bad("pod seccompProfile Unconfined");
    if (psc.runAsUser === 0) bad("pod runAsUser 0");
    const containers = [].concat(spec.initContainers || [], spec.containers || [],
                                 spec.ephemeralContainers || []);
    if (containers.length === 0) bad("no containers");
    for (const c of containers) {
        const sc = c.securityContext || {};
        const who = `container ${c.name}`;
        if (sc.privileged) bad(`${who}: privileged`);
        if (sc.allowPrivilegeEscalation !== false)
            bad(`${who}: allowPrivilegeEscalation is not false`);
        const caps = sc.capabilities || {};
        if (!(caps.drop || []).includes("ALL")) bad(`${who}: capabilities do not drop ALL`);
        for (const cap of caps.add || [])
            if (cap !== "NET_BIND_SERVICE") bad(`${who}: adds capability ${cap}`);
        const nonRoot = sc.runAsNonRoot !== undefined ? sc.runAsNonRoot : psc.runAsNonRoot;
        if (nonRoot !== true) bad(`${who}: runAsNonRoot is not true`);
        if (sc.runAsUser === 0) bad(`${who}: runAsUser 0`);
        const seccomp = (sc.seccompProfile || {}).type || podSeccomp;
        if (seccomp !== "RuntimeDefault" && seccomp !== "Localhost")
            bad(`${who}: seccompProfile is not RuntimeDefault or Localhost (${seccomp})`);
        if (sc.procMount && sc.procMount !== "Default") bad(`${who}: procMount ${sc.procMount}`);
        seLinux(sc, who);
        for (const p of c.ports || [])
            if (p.hostPort) bad(`${who}: hostPort ${p.hostPort}`);
    }
}

async function main() {
    const file = process.argv[2];
    if (!file) {
        console.error("usage: node check.js FILE.json");
        process.exit(2);
    }
    const objs = JSON.parse(fs.readFileSync(file, "utf8"));
    const problems = [];
    let checked = 0, pods = 0;
    for (const obj of objs) {
        if (!obj || !obj.apiVersion || !obj.kind) {
            problems.push(`object without apiVersion/kind: ${JSON.stringify(obj).slice(0, 80)}`);
            continue;
        }
        const where = `${obj.kind}/${(obj.metadata || {}).name}`;
        const Model = await modelFor(obj.apiVersion, obj.kind);
        if (!Model) {
            problems.push(`${where}: no schema for ${obj.apiVersion} ${obj.kind}`);
            continue;
        }
        try {
            new Model(obj).validate();
        } catch (e) {
            const detail = e.errors ? e.errors.map((x) => `${x.instancePath} ${x.message}` +
                (x.params && x.params.additionalProperty ? ` (${x.params.additionalProperty})` : ""))
                .join("; ") : e.message;
            problems.push(`${where}: schema: ${detail}`);
        }
        checked++;
        const specs = [].concat(podSpecOf(obj) || []);
        for (const s of specs) {
            if (!s) { problems.push(`${where}: no pod spec`); continue; }
            restricted(s, where, problems);
            pods++;
        }
    }
    for (const p of problems) console.log(p);
    console.log(`${checked} objects checked against their schemas, ${pods} pod templates against ` +
                `Pod Security restricted: ${problems.length} problems`);
    process.exit(problems.length ? 1 : 0);
}

await main();
