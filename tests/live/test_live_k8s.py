"""deploy/k8s: every manifest loads into the kubernetes client's typed models (an unknown or
misspelt field fails, as `kubectl apply --validate=strict` would), and the parts a live class needs
are there: cookie session affinity on the Ingress, health probes on the app, ROOM_STORE pointing
at the Redis Service. No cluster is needed."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

yaml = pytest.importorskip("yaml")
k8s = pytest.importorskip("kubernetes.client")

K8S = Path(__file__).resolve().parents[2] / "deploy" / "k8s"
KINDS = {("v1", "Namespace"): "V1Namespace", ("v1", "Service"): "V1Service",
         ("apps/v1", "Deployment"): "V1Deployment", ("networking.k8s.io/v1", "Ingress"): "V1Ingress",
         ("networking.k8s.io/v1", "NetworkPolicy"): "V1NetworkPolicy",
         ("policy/v1", "PodDisruptionBudget"): "V1PodDisruptionBudget"}


def strict(data, type_name: str, where: str = ""):
    """`data` (parsed YAML) as the client's typed model `type_name`; unknown keys raise."""
    if data is None:
        return None
    m = re.fullmatch(r"(?:list|List)\[(.+)\]", type_name)
    if m:
        assert isinstance(data, list), f"{where}: expected a list"
        return [strict(x, m.group(1), f"{where}[{i}]") for i, x in enumerate(data)]
    m = re.fullmatch(r"(?:dict\(str, (.+)\)|Dict\[str, (.+)\])", type_name)
    if m:
        assert isinstance(data, dict), f"{where}: expected a mapping"
        return {k: strict(v, m.group(1) or m.group(2), f"{where}.{k}") for k, v in data.items()}
    if type_name in ("str", "int", "bool", "float", "object", "datetime", "date"):
        py = {"str": str, "int": int, "bool": bool, "float": (int, float)}.get(type_name)
        if py is not None:
            assert isinstance(data, py) and not (py is int and isinstance(data, bool)), \
                f"{where}: {data!r} is not {type_name}"
        return data
    klass = getattr(k8s, type_name)
    assert isinstance(data, dict), f"{where}: expected a {type_name} mapping"
    by_json = {j: a for a, j in klass.attribute_map.items()}
    unknown = set(data) - set(by_json)
    assert not unknown, f"{where}: unknown field(s) {sorted(unknown)} for {type_name}"
    kwargs = {by_json[j]: strict(v, klass.openapi_types[by_json[j]], f"{where}.{j}") for j, v in data.items()}
    return klass(**kwargs)  # the model's own checks: required fields, enums


def load_all() -> list:
    out = []
    for f in sorted(K8S.glob("*.yaml")):
        for doc in yaml.safe_load_all(f.read_text()):
            if doc is None:
                continue
            key = (doc.get("apiVersion"), doc.get("kind"))
            assert key in KINDS, f"{f.name}: unexpected {key}"
            out.append(strict(doc, KINDS[key], f"{f.name}:{doc['kind']}/{doc['metadata']['name']}"))
    return out


def test_the_strict_loader_catches_unknown_fields():
    doc = yaml.safe_load((K8S / "app.yaml").read_text().split("---")[0])
    doc["spec"]["template"]["spec"]["containers"][0]["readinessprobe"] = doc["spec"]["template"]["spec"]["containers"][0].pop("readinessProbe")
    with pytest.raises(AssertionError, match="readinessprobe"):
        strict(doc, "V1Deployment")
    doc = yaml.safe_load((K8S / "app.yaml").read_text().split("---")[0])
    doc["spec"]["replicas"] = "three"
    with pytest.raises(AssertionError, match="not int"):
        strict(doc, "V1Deployment")


def objects() -> dict:
    return {(o.kind, o.metadata.name): o for o in load_all()}


def test_every_manifest_loads_and_lives_in_one_namespace():
    objs = load_all()
    assert {o.kind for o in objs} >= {"Deployment", "Service", "Ingress", "Namespace"}
    assert {o.metadata.namespace for o in objs if o.kind != "Namespace"} == {"attention-lab"}


def test_app_probes_and_room_store():
    o = objects()
    app = o[("Deployment", "attention-lab")]
    (c,) = app.spec.template.spec.containers
    port = {p.name: p.container_port for p in c.ports}
    assert port == {"http": 8501}
    for probe in (c.readiness_probe, c.liveness_probe, c.startup_probe):
        assert probe.http_get.path == "/_stcore/health" and probe.http_get.port in ("http", 8501)
    assert app.spec.replicas >= 2 and app.spec.strategy.rolling_update.max_unavailable == 0
    env = {e.name: e.value for e in c.env}
    m = re.fullmatch(r"redis://([a-z0-9-]+):(\d+)/(\d+)", env["ROOM_STORE"])
    assert m, env["ROOM_STORE"]
    redis_svc = o[("Service", m.group(1))]
    assert int(m.group(2)) in [p.port for p in redis_svc.spec.ports]
    redis_dep = o[("Deployment", "attention-lab-redis")]
    assert redis_svc.spec.selector.items() <= redis_dep.spec.template.metadata.labels.items()
    (r,) = redis_dep.spec.template.spec.containers
    assert r.args[r.args.index("--maxmemory-policy") + 1] == "volatile-ttl"  # rooms carry TTLs
    svc = o[("Service", "attention-lab")]
    assert svc.spec.selector.items() <= app.spec.template.metadata.labels.items()
    assert {p.target_port for p in svc.spec.ports} <= {"http", 8501}
    pdb = o[("PodDisruptionBudget", "attention-lab")]
    assert pdb.spec.selector.match_labels.items() <= app.spec.template.metadata.labels.items()
    assert pdb.spec.min_available < app.spec.replicas


def test_ingress_cookie_affinity_and_backend():
    o = objects()
    ing = o[("Ingress", "attention-lab")]
    a = ing.metadata.annotations
    assert a["nginx.ingress.kubernetes.io/affinity"] == "cookie"
    assert a["nginx.ingress.kubernetes.io/affinity-mode"] == "persistent"
    assert a["nginx.ingress.kubernetes.io/session-cookie-name"]
    assert int(a["nginx.ingress.kubernetes.io/proxy-read-timeout"]) >= 3600  # idle students stay connected
    assert ing.spec.ingress_class_name == "nginx"
    (rule,) = ing.spec.rules
    (path,) = rule.http.paths
    svc = o[("Service", path.backend.service.name)]
    assert path.backend.service.port.name in [p.name for p in svc.spec.ports]
    assert path.path == "/" and path.path_type == "Prefix"
