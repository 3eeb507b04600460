"""What the rendered objects promise: sandbox hardening, sizing, fleet roles, network isolation,
the config the pods get, quotas that cover what was rendered."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import pytest
import yaml

from dockyard.k8s import build_context, load_infra, load_recipe, render
from dockyard.k8s.pods import container_totals, pod_templates
from dockyard.k8s.quantity import parse_quantity

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "k8s"


def _render(recipe: str = "grpo-code", infra: str = "gke-a3") -> list[dict]:
    r = load_recipe(EXAMPLES / "recipes" / f"{recipe}.yaml")
    i = load_infra(EXAMPLES / "infra" / f"{infra}.yaml")
    return render(build_context(r, i, EXAMPLES / "recipes"))


@pytest.fixture(scope="module")
def objects() -> list[dict]:
    return _render()


def one(objects: list[dict], kind: str, name: str | None = None) -> dict:
    found = [
        o for o in objects if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)
    ]
    assert len(found) == 1, f"{kind} {name}: {len(found)} found"
    return found[0]


def _labels_match(selector: dict, labels: dict) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


def test_sandbox_pod_is_hardened(objects) -> None:
    pod = one(objects, "Deployment")["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    sc = c["securityContext"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] > 0
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["privileged"] is False
    assert sc["capabilities"] == {"drop": ["ALL"], "add": ["SYS_ADMIN"]}
    # the API server rejects allowPrivilegeEscalation=false with SYS_ADMIN: it must not be set false
    assert sc.get("allowPrivilegeEscalation") is not False
    assert pod["automountServiceAccountToken"] is False
    assert pod["enableServiceLinks"] is False
    # writable places are emptyDirs with size limits: workspace (--work-dir), cache, /tmp
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["mountPath"]: m["name"] for m in c["volumeMounts"]}
    for path in ("/workspace", "/tmp", "/var/cache/dockyard"):
        assert "sizeLimit" in volumes[mounts[path]]["emptyDir"]
    assert c["args"][c["args"].index("--work-dir") + 1] == "/workspace"
    assert c["args"][c["args"].index("--host") + 1] == "0.0.0.0"
    assert "--token-file" in c["args"]
    for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
        assert c[probe]["httpGet"] == {"path": "/healthz", "port": "http"}
    # grace period outlasts the service's drain timeout
    drain = float(c["args"][c["args"].index("--drain-timeout") + 1])
    assert pod["terminationGracePeriodSeconds"] > drain


def test_sandbox_without_capabilities_gets_no_new_privs() -> None:
    pod = one(_render("grpo-code", "onprem-hardened"), "Deployment")["spec"]["template"]["spec"]
    sc = pod["containers"][0]["securityContext"]
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["procMount"] == "Unmasked"
    assert pod["hostUsers"] is False
    assert pod["securityContext"]["seccompProfile"] == {
        "type": "Localhost",
        "localhostProfile": "profiles/dockyard-bwrap.json",
    }


def test_sandbox_sizing_follows_the_formula(objects) -> None:
    recipe = yaml.safe_load((EXAMPLES / "recipes" / "grpo-code.yaml").read_text())["sandbox"]
    res = one(objects, "Deployment")["spec"]["template"]["spec"]["containers"][0]["resources"]
    w = recipe["workers"]
    cpu = Decimal("0.25") + w * parse_quantity(recipe["per_worker"]["cpu"])
    mem = 256 * 2**20 + w * parse_quantity(recipe["per_worker"]["memory"])
    assert parse_quantity(res["requests"]["cpu"]) == cpu
    assert parse_quantity(res["requests"]["memory"]) == mem
    assert res["limits"] == res["requests"]  # qos: guaranteed


def test_network_policy_admits_only_this_deployments_ray_pods(objects) -> None:
    np = one(objects, "NetworkPolicy")["spec"]
    assert np["policyTypes"] == ["Ingress", "Egress"]
    assert np["egress"] == []
    sandbox_labels = one(objects, "Deployment")["spec"]["template"]["metadata"]["labels"]
    assert _labels_match(np["podSelector"]["matchLabels"], sandbox_labels)
    ray_peer = np["ingress"][0]["from"][0]["podSelector"]["matchLabels"]
    ray_pods = [pt.template["metadata"]["labels"] for pt in pod_templates(one(objects, "RayJob"))]
    assert len(ray_pods) == 3
    assert all(_labels_match(ray_peer, labels) for labels in ray_pods)
    assert not _labels_match(ray_peer, sandbox_labels)
    assert np["ingress"][0]["ports"] == [{"protocol": "TCP", "port": 8080}]


def test_separate_sandbox_namespace_is_admitted_by_namespace(tmp_path) -> None:
    objects = _render("tiny-cpu", "kind-local")
    np = one(objects, "NetworkPolicy")
    assert np["metadata"]["namespace"] == "dockyard-sandbox"
    peer = np["spec"]["ingress"][0]["from"][0]
    assert peer["namespaceSelector"] == {
        "matchLabels": {"kubernetes.io/metadata.name": "dockyard-dev"}
    }
    levels = {
        o["metadata"]["name"]: o["metadata"]["labels"]["pod-security.kubernetes.io/enforce"]
        for o in objects
        if o["kind"] == "Namespace"
    }
    assert levels == {
        "dockyard-dev": "baseline",
        "dockyard-sandbox": "privileged",
    }  # SYS_ADMIN is beyond baseline


def test_hpa_pdb_and_service_target_the_sandbox(objects) -> None:
    dep = one(objects, "Deployment")
    labels = dep["spec"]["template"]["metadata"]["labels"]
    hpa = one(objects, "HorizontalPodAutoscaler")["spec"]
    assert hpa["scaleTargetRef"]["name"] == dep["metadata"]["name"]
    assert hpa["metrics"][0]["pods"]["metric"]["name"] == "dockyard_sandbox_queue_depth"
    assert (hpa["minReplicas"], hpa["maxReplicas"]) == (4, 64)
    assert dep["spec"]["replicas"] == 4
    assert _labels_match(
        one(objects, "PodDisruptionBudget")["spec"]["selector"]["matchLabels"], labels
    )
    assert _labels_match(one(objects, "Service")["spec"]["selector"], labels)


def test_ray_groups_carry_fleet_roles_and_gpus(objects) -> None:
    spec = one(objects, "RayJob")["spec"]["rayClusterSpec"]
    groups = {g["groupName"]: g for g in spec["workerGroupSpecs"]}
    assert set(groups) == {"trainer", "inference"}
    for role, g in groups.items():
        (c,) = g["template"]["spec"]["containers"]
        env = {e["name"]: e["value"] for e in c["env"]}
        assert env["DOCKYARD_FLEET_ROLE"] == role
        assert g["labels"] == {"dockyard.io/fleet-role": role}  # Ray node label
        # the custom resource dockyard.train.runtime pins the fleet to, in KubeRay's quoting
        assert g["rayStartParams"]["resources"] == '"{\\"fleet:' + role + '\\": 1000}"'
        assert g["template"]["metadata"]["labels"]["dockyard.io/fleet-role"] == role
        assert (
            c["resources"]["limits"]["nvidia.com/gpu"]
            == "8"
            == c["resources"]["requests"]["nvidia.com/gpu"]
        )
        assert g["replicas"] == g["minReplicas"] == g["maxReplicas"] == 2
        assert g["template"]["spec"]["tolerations"][0]["key"] == "nvidia.com/gpu"
        assert (
            env["DOCKYARD_SANDBOX_URL"]
            == "http://grpo-code-sandbox.dockyard.svc.cluster.local:8080"
        )
    head = spec["headGroupSpec"]["template"]["spec"]
    assert "nvidia.com/gpu" not in head["containers"][0]["resources"]["limits"]
    assert head["nodeSelector"] == {"cloud.google.com/gke-nodepool": "cpu-pool"}


def test_configmap_holds_the_resolved_config_with_deployment_paths(objects) -> None:
    cm = one(objects, "ConfigMap")
    config = yaml.safe_load(cm["data"]["config.yaml"])
    assert "defaults" not in config
    assert config["grpo"]["max_num_steps"] == 1000  # the recipe's override
    assert config["policy"]["model_name"] == "Qwen/Qwen2.5-7B-Instruct"  # the example config
    assert config["loss_fn"]["ratio_clip_max"] == 0.28  # inherited from examples/configs/base.yaml
    assert config["policy"]["generation"]["vllm_cfg"]["max_model_len"] == 4096  # ${...} resolved
    assert config["env"]["code"]["sandbox_urls"] == [
        "http://grpo-code-sandbox.dockyard.svc.cluster.local:8080"
    ]
    assert config["checkpointing"]["checkpoint_dir"] == "/checkpoints/grpo-code/checkpoints"
    assert config["cluster"]["address"] == "auto"
    # one FSDP rank per trainer GPU, derived: recipe.ray.trainer has 2 nodes x 8 GPUs
    assert config["cluster"]["trainer_ranks"] == 16
    rayjob = one(objects, "RayJob")
    assert "/etc/dockyard/config.yaml" in rayjob["spec"]["entrypoint"]
    for pt in pod_templates(rayjob):
        mounts = {
            m["mountPath"]: m["name"] for m in pt.template["spec"]["containers"][0]["volumeMounts"]
        }
        assert mounts["/etc/dockyard"] == "config"
        assert mounts["/checkpoints"] == "checkpoints"


def test_quota_covers_everything_rendered(objects) -> None:
    quota = one(objects, "ResourceQuota")["spec"]["hard"]
    hpa_max = {"grpo-code-sandbox": 64}
    need: dict[str, Decimal] = {}
    pods = 1  # the RayJob submitter
    for obj in objects:
        for pt in pod_templates(obj, hpa_max):
            pods += pt.max_pods
            for name, amount in container_totals(pt.template, "requests").items():
                need[name] = need.get(name, Decimal(0)) + amount * pt.max_pods
    assert int(quota["pods"]) >= pods
    for name, amount in need.items():
        assert parse_quantity(quota[f"requests.{name}"]) >= amount, name
    assert quota["requests.nvidia.com/gpu"] == str(int(32 * 1.25))
    # and every pod uses the opt-in PriorityClass
    pc = one(objects, "PriorityClass")["metadata"]["name"]
    for obj in objects:
        for pt in pod_templates(obj):
            assert pt.template["spec"]["priorityClassName"] == pc


def test_raycluster_mode_and_no_sandbox() -> None:
    objects = _render("grpo-math-raycluster", "gke-a3")
    assert [o["kind"] for o in objects] == ["ConfigMap", "PersistentVolumeClaim", "RayCluster"]
    config = yaml.safe_load(one(objects, "ConfigMap")["data"]["config.yaml"])
    assert "sandbox_urls" not in config["env"]["math"] or not config["env"]["math"]["sandbox_urls"]
    for pt in pod_templates(one(objects, "RayCluster")):
        env = {e["name"] for e in pt.template["spec"]["containers"][0]["env"]}
        assert "DOCKYARD_SANDBOX_URL" not in env
