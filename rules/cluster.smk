# Where jobs run: controller-local inputs under a remote default storage (S3 on NRP), GPU requests
# that follow the work, and a preflight check of the S3 bucket. No stage logic here.
# docs/clusters.md explains all three; the pure parts live in src/benchmaker/staging.py.
import os

from benchmaker.config_paths import config_paths
from benchmaker.snakemake_compat import (
    configfiles_given,
    configfiles_read,
    default_storage_prefix,
    default_storage_provider,
    executor_name,
    executor_setting,
    is_dry_run,
    is_spawned_job,
    set_job_configfiles,
    storage_plugin_settings,
)
from benchmaker.staging import (
    StagingError,
    check_s3_prefix,
    controller_configfile,
    is_storage_url,
    model_source_files,
    relocate_configfiles,
    stage_key,
    staged_files,
    volume_problems,
)

# A default storage provider (--profile nrp: s3) means no shared file system: every workflow file
# lives in the storage, and files the config names on the controller's disk must be staged there.
STAGING = default_storage_provider(workflow) is not None
# True in a job that Snakemake spawned in a pod or a cluster job (it re-parses this file there)
SPAWNED = is_spawned_job(workflow)
# path as written -> (key, file name, is folder)
STAGED = {}

# Every local path the config names, from the schema's x-path marking (benchmaker.config_paths):
# the one list that staging, the pods' path mapping and the checks below are derived from.
CONFIG_PATHS = config_paths(config)
# path as written -> "file" | "dir", for the inputs that are staged (x-path-use: stage)
STAGE_KINDS = {p.path: p.kind for p in CONFIG_PATHS if p.use == "stage"}

if STAGING:
    for _p in CONFIG_PATHS:
        if _p.use == "output" and os.path.isabs(os.path.expanduser(_p.path)):
            raise WorkflowError(
                f"{_p.key} is absolute ({_p.value!r}); with a default storage "
                "provider (--profile nrp) every workflow file lives under the storage prefix, so it must "
                "be relative (e.g. `results`): it becomes <prefix>/results/..."
            )
if STAGING and not SPAWNED:
    # dry runs too: every configured input must exist on the controller (it is staged from there)
    _missing = []
    for _p in CONFIG_PATHS:
        if _p.use == "stage":
            try:
                staged_files(_p.path)
            except StagingError as exc:
                _missing.append(f"{_p.key}: {exc}")
    if _missing:
        raise WorkflowError(
            "files the config names are not on this machine (the controller stages them to the "
            "storage from here):\n  - " + "\n  - ".join(_missing)
        )


def pod_volumes():
    """Mount paths of the volumes every pod gets: the kubernetes executor's persistent volumes (a
    dry run has no executor settings: then what profiles/nrp gives it, BENCHMAKER_K8S_PVC).
    """
    vols = executor_setting(workflow, "persistent_volumes")
    if vols is not None:
        return [str(v.path) for v in vols]
    return [
        v.split(":", 1)[1]
        for v in (os.environ.get("BENCHMAKER_K8S_PVC") or "").split()
        if ":" in v
    ]


# folders too large to stage (x-path-use: volume) must be on a volume of every pod; said at dry run
VOLUME_PROBLEMS = (
    volume_problems([p for p in CONFIG_PATHS if p.use == "volume"], pod_volumes())
    if STAGING and not SPAWNED
    else []
)
for _msg in VOLUME_PROBLEMS:
    print(f"benchmaker: warning: {_msg}", file=sys.stderr)


def cluster_failure_summary(since):
    """The final block's part for jobs that failed in a pod (benchmaker.podlogs), with the fix of
    each config key whose problem is known (a volume folder no pod holds: BENCHMAKER_K8S_PVC).
    """
    if not STAGING or SPAWNED:
        return None
    from benchmaker.podlogs import pod_failure_summary

    fixes = {}
    for p in CONFIG_PATHS:
        if p.use == "volume":
            fix = (
                f"{p.key} must be on a volume of every pod: put it on a ReadWriteMany volume and export "
                f"BENCHMAKER_K8S_PVC=<pvc name>:<mount path holding {p.path}> (docs/clusters.md)"
            )
            fixes[p.key] = fixes[p.path] = fix
    return pod_failure_summary(since, fixes)


def workflow_input(path, folder=None):
    """A file (or folder) the config names on the controller, as an input that every job can read.

    Whether it is a file or a folder comes from the schema's marking of the key that names it
    (STAGE_KINDS); ``folder`` is given only for files the workflow itself writes (the listings).

    Shared file system (local, SLURM): the path itself. Default storage (NRP): the staged copy
    {RESULTS}/inputs/<file|dir>/<sha256(path as written)[:12]>/<name>, which the controller-side
    rules stage_file/stage_folder upload once (again only when the source is newer). Storage URLs
    are used as they are. Returns [] for an unset path, so it fits `optional` inputs.
    """
    if not path:
        return []
    path = str(path)
    if not STAGING or is_storage_url(path):
        return path
    controller_checks()
    if folder is None:
        if path not in STAGE_KINDS:
            raise WorkflowError(
                f"{path!r} is read by a job but no config key marked `x-path` in config/schema.yaml "
                "names it, so it cannot be staged for jobs without the controller's disk: mark the key"
            )
        folder = STAGE_KINDS[path] == "dir"
    if (
        not SPAWNED
    ):  # the controller: the source must exist (a clear error, not a missing object)
        try:
            staged_files(path)
        except StagingError as exc:
            raise WorkflowError(str(exc))
    name = os.path.basename(os.path.normpath(os.path.expanduser(path)))
    key = stage_key(path)
    STAGED[key] = path
    kind = "dir" if folder else "file"
    return f"{RESULTS}/inputs/{kind}/{key}/{name}"


def _stage_sources(wildcards):
    """The local files a stage job copies (`local`: never mapped to the storage)."""
    path = STAGED.get(wildcards.key)
    if path is None or SPAWNED:
        # a spawned job never runs a stage rule (its input exists in the storage already)
        return []
    try:
        files = staged_files(path)
    except StagingError as exc:
        raise WorkflowError(str(exc))
    return [local(f) for f in files.values()]


def model_weight_inputs(spec):
    """{"weights": ...} for a CLIP model spec with local weights (none for tags / hf-hub:)."""
    sources = model_source_files(spec, by_name=STAGING)
    if not sources:
        return {}
    src = sources[0]
    model = str(spec.get("model") or "")
    if model.startswith("local-dir:"):
        if STAGING:
            return {"weights": workflow_input(src)}
        # shared file system: the files themselves (a missing folder is the model loader's error)
        folder = Path(src).expanduser()
        keep = [
            f
            for f in folder.glob("*")
            if f.is_file()
            and (
                f.name == "open_clip_config.json"
                or f.name.endswith((".safetensors", ".bin", ".pth", ".pt"))
            )
        ]
        return {"weights": sorted(str(f) for f in keep)}
    return {
        "weights": workflow_input(str(Path(src).expanduser()) if not STAGING else src)
    }


def pixel_model_inputs(wildcards):
    """What decode_images reads of a local model: a local-dir: folder's open_clip_config.json (its
    input size; the staged folder under --profile nrp), never the weights, so that replacing a
    checkpoint re-embeds without decoding the images again (docs/similarity.md)."""
    model = str(config["similarity"].get("model") or "")
    if not model.startswith("local-dir:"):
        return {}
    found = model_weight_inputs(config["similarity"]).get("weights", [])
    if STAGING:
        return {"weights": found}
    return {"weights": [f for f in found if Path(f).name == "open_clip_config.json"]}


def vision_weight_inputs(wildcards):
    """Local CLIP weights of the clip vision adapter (staged under --profile nrp), else none."""
    if VISION_ADAPTER != "clip":
        return {}
    return model_weight_inputs(config["vision"]["clip"])


# Config files outside the working directory (`--configfile ~/my.yaml`): jobs without a shared file
# system get the sources from an archive of the working directory only, so the controller copies
# such files below it (.snakemake/benchmaker/configfiles/) and hands the copies to the jobs.
if STAGING and not SPAWNED:
    # no --configfile: the Snakefile's own configfile: (config/config.yaml) stays first for the jobs
    # (a job given --configfiles skips it)
    _files = [str(f) for f in configfiles_given(workflow)] or configfiles_read(workflow)
    _moved = relocate_configfiles(_files, os.getcwd())
    # What the controller decided from its own disk while validating the config (the smoke-test
    # verdict reads the local-dir: model folders, benchmaker.smoke) goes to the jobs as a last config
    # file: a pod re-validates the config without those folders and would otherwise record another
    # verdict in the report and the card than a local run of the same inputs.
    from benchmaker.smoke import verdict as _smoke_verdict

    _verdict = controller_configfile(_smoke_verdict(config), os.getcwd())
    set_job_configfiles(workflow, [_moved.get(f, f) for f in _files] + [_verdict])


def gpu_resources(uses_model):
    """Resources of a job: a GPU only when it runs a model (CLIP), else nothing GPU-related. Which
    rules run one is declared with their stage (benchmaker.stages: `gpu=`, read by needs_gpu).

    `gpu=1` becomes `--gpus=1` on SLURM and an `nvidia.com/gpu` request + limit + toleration on
    Kubernetes (profiles/nrp sets gpu_manufacturer by default; the executor reads it only for jobs
    with a `gpu` resource). The slurm profile's GPU knobs are read here so that they reach exactly
    the jobs that run a model: BENCHMAKER_SLURM_GPU_FLAG=gres (`--gres=gpu[:model]:1` instead of
    `--gpus`), BENCHMAKER_SLURM_GPU_MODEL, BENCHMAKER_SLURM_GPU_PARTITION.
    """
    if not uses_model:
        return {}
    env = lambda k: (os.environ.get(k) or "").strip()
    model = env("BENCHMAKER_SLURM_GPU_MODEL")
    if env("BENCHMAKER_SLURM_GPU_FLAG") == "gres":
        res = {"gres": f"gpu:{model}:1" if model else "gpu:1"}
    else:
        res = {"gpu": 1}
        if model:
            res["gpu_model"] = model
    partition = env("BENCHMAKER_SLURM_GPU_PARTITION")
    if partition:
        res["slurm_partition"] = partition
    return res


# One clear error before anything is submitted when the S3 bucket is not usable.
if STAGING and not SPAWNED and default_storage_provider(workflow) == "s3":
    _s3 = storage_plugin_settings(workflow, "s3")
    try:
        check_s3_prefix(
            default_storage_prefix(workflow),
            endpoint_url=getattr(_s3, "endpoint_url", None),
            access_key=getattr(_s3, "access_key", None),
            secret_key=getattr(_s3, "secret_key", None),
            region=getattr(_s3, "region", None),
        )
    except StagingError as exc:
        raise WorkflowError(f"S3 preflight: {exc}")


# snakemake-storage-plugin-s3 0.3.6 caches "is not a folder" per object: the controller asks about
# a directory() output (summary/, hf_dataset/) before the job runs, and after the pod uploaded it
# still answers "missing in storage". The patch (benchmaker/snakemake_compat.py, with the other uses
# of Snakemake internals) forgets that answer before every existence check.
if STAGING and default_storage_provider(workflow) == "s3":
    from benchmaker.snakemake_compat import patch_s3_fresh_dir

    try:
        patch_s3_fresh_dir()
    except CompatError as exc:
        raise WorkflowError(str(exc))


# A pod that Kubernetes ends (OOMKilled, Evicted, past a deadline) leaves no error line: when the
# executor reports a failed Job, the controller records what the API says ended its pod beside the
# pod's log (benchmaker/snakemake_compat.py record_pod_status); the final block names it and the fix.
if STAGING and not SPAWNED:
    try:
        from benchmaker.snakemake_compat import record_pod_status

        record_pod_status()
    except ImportError:  # no kubernetes executor installed: nothing to record
        pass
    except CompatError as exc:
        raise WorkflowError(str(exc))


# One clear error before anything is submitted when the Kubernetes namespace is not usable
# (missing, no rights, bad credentials) instead of an ApiException traceback at the first Job; and
# the Jobs a dead controller left behind. Snakemake knows its executor only once it executes (after
# this file is parsed), so this runs while the DAG is built (from workflow_input(), which every
# staged run calls), before the sources are uploaded and anything is submitted.
_CONTROLLER_CHECKED = []


def controller_checks():
    if _CONTROLLER_CHECKED or SPAWNED or not STAGING:
        return
    name = executor_name(workflow)
    if name is None:  # still parsing
        return
    _CONTROLLER_CHECKED.append(True)
    if is_dry_run(workflow) or name != "kubernetes":
        return
    from benchmaker.kube import KubeError, cancel_jobs, check_namespace, previous_jobs

    ns = executor_setting(workflow, "namespace")
    try:
        check_namespace(ns)
        # A controller that died (killed, evicted, restarted) leaves its Jobs running: cancel this
        # build's Jobs that are still active (found by the build's storage prefix in their command),
        # so that two Jobs never write the same output; what they would finish unwatched is remade
        # (the dead controller left it marked incomplete). A lock means a controller may still run
        # from this folder (Snakemake checks it only after the DAG is built): leave its Jobs alone;
        # after a crash `--unlock` (the README's resume line) removes it.
        if any(Path(".snakemake/locks").glob("*")):
            return
        orphans = previous_jobs(ns, default_storage_prefix(workflow))
        if orphans:
            rules = sorted({j.rule for j in orphans})
            print(
                f"benchmaker: {len(orphans)} Job(s) of a previous controller of this build still run "
                f"in namespace {ns!r} ({', '.join(rules)}): cancelling them before submitting "
                f"anything; their outputs are remade ({', '.join(j.name for j in orphans)})",
                file=sys.stderr,
            )
            cancel_jobs(ns, orphans)
    except KubeError as exc:
        # one message, not an input function's traceback: nothing has been submitted yet
        print(f"WorkflowError:\n{exc}", file=sys.stderr)
        raise SystemExit(1)


# Outputs a job finished while no controller watched are remade, not trusted: the controller marks a
# job's outputs incomplete when it submits it, and only a controller, recording their metadata,
# removes the mark. On a shared file system (SLURM) the job's own Snakemake would remove it; the
# patch (benchmaker/snakemake_compat.py) leaves that to the controller, as on Kubernetes. The mark is
# made before a job is submitted, not once the submission returned (a controller that dies in between
# leaves a job in the cluster whose outputs nothing marks).
try:
    from benchmaker.snakemake_compat import (
        keep_job_incomplete_marks,
        mark_before_submission,
    )

    keep_job_incomplete_marks()
    mark_before_submission()
except CompatError as exc:
    raise WorkflowError(str(exc))


# A SLURM controller that died (kill -9, lost SSH session) leaves its jobs queued and running on the
# compute nodes, where pgrep cannot see them. Before the resumed controller submits anything
# (onstart: the DAG is built and this controller holds the lock), it cancels this build's jobs that
# are still queued or running (benchmaker.slurm: the user's jobs the executor submitted from this
# working directory) and says how many; their outputs are remade (marked incomplete, above). A lock
# already there while parsing means a controller may still run from this folder (after a crash the
# README's `--unlock` removes it): then its jobs are left alone.
LOCKED_AT_PARSE = not SPAWNED and any(Path(".snakemake/locks").glob("*"))


def slurm_recovery():
    if SPAWNED or LOCKED_AT_PARSE:
        return
    if executor_name(workflow) != "slurm":
        return
    from benchmaker.slurm import SlurmError, cancel_jobs, previous_jobs

    try:
        orphans = previous_jobs(os.getcwd())
        if orphans:
            rules = sorted({j.rule for j in orphans})
            print(
                f"benchmaker: {len(orphans)} SLURM job(s) of a previous controller of this build "
                f"still queued or running in {os.getcwd()} ({', '.join(rules)}): cancelling them "
                "before submitting anything; their outputs are remade (job ids "
                f"{' '.join(j.job_id for j in orphans)})",
                file=sys.stderr,
            )
            cancel_jobs(orphans)
    except SlurmError as exc:
        raise WorkflowError(str(exc))


onstart:
    slurm_recovery()
