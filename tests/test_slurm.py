"""The slurm profile against a real single-node SLURM on localhost (tests/slurm/slurm-local.sh).

Runs when BENCHMAKER_TEST_SLURM=1 or CI=true (it installs Debian packages and starts daemons, so it
is opt-in on workstations). Where SLURM cannot be set up (not root, no apt, not Debian-like) the
tests are skipped with the script's reason. The cluster is stopped again at the end, by PID, unless
it was already running before (then whoever started it stops it).

What is checked: the full pipeline on the tiny fixture runs through `--profile profiles/slurm`
(plus the automatic workflow profile profiles/default), every non-local job was submitted with
sbatch (SLURM job ids in Snakemake's log, a `.batch` step in sacct), sacct knows every job as
COMPLETED with the rule in its comment, the GPU rule's jobs got gres/gpu and the CPU rules did not,
and the --gres request style works too.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import support

ROOT = support.ROOT
SCRIPT = ROOT / "tests" / "slurm" / "slurm-local.sh"
GPU_RULE = "embed_images"
LOCAL_RULES = {"merge_annotations", "merge_images", "all", "stage_file", "stage_folder", "audit_sample"}

pytestmark = [
    pytest.mark.slurm,
    pytest.mark.skipif(
        not (os.environ.get("BENCHMAKER_TEST_SLURM") == "1" or os.environ.get("CI", "").lower() == "true"),
        reason="real SLURM test: set BENCHMAKER_TEST_SLURM=1 (runs by default when CI=true)",
    ),
]

SUBMITTED = re.compile(r"Job (\d+) has been submitted with SLURM jobid (\d+) \(log: (\S+?)\)\.?$", re.M)


def _slurmctld_running() -> bool:
    pid_file = Path(os.environ.get("SLURM_LOCAL_DIR", "/tmp/slurm-local")) / "pids" / "slurmctld.pid"
    try:
        pid = int(pid_file.read_text().strip())
        return Path(f"/proc/{pid}/comm").read_text().startswith("slurmctld")
    except (OSError, ValueError):
        return False


START_TIMEOUT = 1200  # the script's apt budget (600 s) + five daemons at <= 60 s each + slack


def _script(action: str, timeout: float) -> tuple[int, str, str]:
    """Run slurm-local.sh in its own session; on timeout kill the whole session (apt included)."""
    proc = subprocess.Popen(["bash", str(SCRIPT), action], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True, env={**os.environ, "PATH": support.real_path()})
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # our own process group only (start_new_session)
        out, err = proc.communicate()
        return 124, out, err + f"\n[test] slurm-local.sh {action} timed out after {timeout:.0f}s"
    return proc.returncode, out, err


def _our_daemons() -> dict[str, int]:
    """name -> PID of every daemon slurm-local.sh recorded as started by it (and still running)."""
    pids = {}
    for f in (Path(os.environ.get("SLURM_LOCAL_DIR", "/tmp/slurm-local")) / "pids").glob("*.pid"):
        try:
            pid = int(f.read_text().strip())
            if Path(f"/proc/{pid}/comm").read_text().strip().startswith(f.stem[:15]):
                pids[f.stem] = pid
        except (OSError, ValueError):
            pass
    return pids


def _stop_cluster() -> None:
    started = _our_daemons()
    rc, out, err = _script("stop", 300)
    assert rc == 0, f"slurm-local.sh stop failed:\n{out}\n{err}"
    assert not _slurmctld_running()
    left = {name: pid for name, pid in started.items()
            if Path(f"/proc/{pid}/comm").exists()
            and Path(f"/proc/{pid}/comm").read_text().strip().startswith(name[:15])}
    assert not left, f"daemons still running after stop: {left}"


@pytest.fixture(scope="module")
def slurm_cluster():
    was_up = _slurmctld_running()
    t0 = time.monotonic()
    rc, out, err = _script("start", START_TIMEOUT)
    if rc == 3:
        reason = (err.strip().splitlines() or ["cannot set up SLURM here"])[-1]
        pytest.skip(f"local SLURM unavailable: {reason}")
    if rc != 0:
        if not was_up:  # daemons started before the failure must not outlive the test
            _stop_cluster()
        pytest.fail(f"slurm-local.sh start failed (rc {rc}):\n{out}\n{err[-6000:]}")
    print(f"local SLURM up in {time.monotonic() - t0:.1f}s (already running: {was_up})")
    try:
        yield
    finally:
        if not was_up:
            _stop_cluster()


def _command(workdir: Path, config: Path, extra: list[str], env: dict) -> tuple[list[str], dict]:
    e = {k: v for k, v in os.environ.items() if not k.startswith("BENCHMAKER_SLURM_")}
    e.update(HF_HUB_OFFLINE="1", BENCHMAKER_SLURM_ACCOUNT="root", BENCHMAKER_SLURM_JOBS="6", **env)
    e["PATH"] = support.real_path(e.get("PATH"))  # the real scontrol (tests/conftest.py hides it)
    e["PYTHONPATH"] = str(ROOT / "src") + os.pathsep + e.get("PYTHONPATH", "")
    cmd = [sys.executable, "-m", "snakemake", "--profile", "profiles/slurm", "-d", str(workdir),
           "--configfile", str(config),
           # CI speed: poll after 1 s, no retries, short latency wait; logs kept for debugging
           "--slurm-init-seconds-before-status-checks", "1", "--retries", "0", "--latency-wait", "5",
           "--slurm-keep-successful-logs", *extra]
    return cmd, e


def _run(workdir: Path, config: Path, extra: list[str], env: dict) -> subprocess.CompletedProcess:
    cmd, e = _command(workdir, config, extra, env)
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env=e, timeout=1500)


def _sacct(job_ids: list[str]) -> dict[str, dict]:
    """sacct rows per job id (allocation) plus the set of step names seen for it."""
    out = subprocess.run(
        ["sacct", "-P", "-n", "--starttime", "now-1days", "-j", ",".join(job_ids),
         "-o", "JobIDRaw,JobID,State,AllocTRES,Comment,ExitCode"],
        capture_output=True, text=True, check=True).stdout
    rows: dict[str, dict] = {}
    for line in out.splitlines():
        raw, jid, state, tres, comment, exit_code = line.split("|")
        base, _, step = jid.partition(".")
        if not step:
            rows.setdefault(base, {"steps": set()}).update(
                state=state, tres=tres, comment=comment, exit=exit_code)
        else:
            rows.setdefault(base, {"steps": set()})["steps"].add(step)
    return rows


def _wait_for_accounting(job_ids: list[str], timeout: float = 60) -> dict[str, dict]:
    deadline = time.monotonic() + timeout
    while True:
        rows = _sacct(job_ids)
        if all(j in rows and "state" in rows[j] and "batch" in rows[j]["steps"] for j in job_ids):
            return rows
        if time.monotonic() > deadline:
            return rows
        time.sleep(2)


def _metadata_file(corpus: Path, path: Path) -> Path:
    """Labels for the tiny corpus (vision adapter `metadata`: a CPU-only vision job)."""
    import json

    rows = []
    for p in sorted(corpus.rglob("*")):
        rel = p.relative_to(corpus).as_posix()
        if p.is_file() and not rel.startswith("broken/"):
            color, shape = rel.split("/")[0], rel.split("/")[1].split("_")[0]
            rows.append({"image_id": rel, "color": color, "shape": shape, "is_bright": color in ("yellow", "red")})
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return path


@pytest.fixture(scope="module")
def slurm_run(slurm_cluster, tmp_path_factory, tiny_corpus, tiny_clip):
    work = tmp_path_factory.mktemp("slurm_run")
    # the metadata vision adapter: vision jobs must get no GPU (issue #10); embed_images gets one
    cfg = support.tiny_config(work, tiny_corpus, tiny_clip, vision={"adapter": "metadata"},
                              paths={"metadata_jsonl": str(_metadata_file(tiny_corpus, work / "metadata.jsonl"))})
    config = support.write_config(work / "config.yaml", cfg)
    t0 = time.monotonic()
    res = _run(work, config, [], {})
    wall = time.monotonic() - t0
    out = res.stdout + res.stderr
    (work / "snakemake.out").write_text(out)
    print(f"workflow on SLURM: rc={res.returncode} in {wall:.1f}s (log: {work / 'snakemake.out'})")
    return {"res": res, "out": out, "work": work, "config": config, "cfg": cfg, "wall": wall}


def _submissions(out: str) -> list[tuple[str, str, str]]:
    """(snakemake job id, SLURM job id, rule) for every sbatch submission in the log."""
    subs = []
    for sm_id, slurm_id, log in SUBMITTED.findall(out):
        m = re.search(r"rule_(\w+?)/", log)
        assert m, log
        subs.append((sm_id, slurm_id, m.group(1)))
    return subs


def test_workflow_jobs_go_through_sbatch_and_sacct(slurm_run):
    out = slurm_run["out"]
    assert "Using profiles profiles/slurm and workflow specific profile profiles/default" in out
    subs = _submissions(out)
    rules = {r for _, _, r in subs}
    assert subs, f"no sbatch submissions in the log:\n{out[-4000:]}"
    # every non-local job was submitted, once; localrules never were
    n = slurm_run["cfg"]["n_shards"]
    counts = {r: sum(1 for _, _, x in subs if x == r) for r in rules}
    # preprocess, decode_images (the CPU job that fills the GPU job's pixel store) and vision run per
    # shard; the judge audit (on by default) adds its labelling page and report
    # (audit_sample is a local rule)
    assert counts == {"preprocess": n, "decode_images": n, "vision": n, GPU_RULE: n, "plan": 1,
                      "queries": 1, "judge": 1, "embed_queries": 1, "score": 1, "summary": 1, "export": 1,
                      "audit_labelling": 1, "audit_report": 1}, counts
    assert not rules & LOCAL_RULES, rules & LOCAL_RULES

    ids = [s for _, s, _ in subs]
    acct = _wait_for_accounting(ids)
    for _, slurm_id, rule in subs:
        row = acct.get(slurm_id)
        assert row and "state" in row, f"sacct does not know job {slurm_id} ({rule})"
        assert "batch" in row["steps"], f"job {slurm_id} has no batch step: not an sbatch job"
        assert row["comment"].startswith(f"rule_{rule}"), row
        gpus = re.search(r"gres/gpu=(\d+)", row["tres"])
        if rule == GPU_RULE:
            assert gpus and gpus.group(1) == "1", f"GPU rule job {slurm_id}: {row['tres']}"
        else:  # vision with the metadata adapter included: no model, no GPU
            assert not gpus, f"CPU job {rule} got a GPU: {row['tres']}"
    # the log dirs the plugin writes next to the workflow
    assert (slurm_run["work"] / ".snakemake" / "slurm_logs" / f"rule_{GPU_RULE}").is_dir()

    # success last: the submission facts above hold even while stage code is still changing
    failed = {s: acct[s]["state"] for s in ids if acct.get(s, {}).get("state") != "COMPLETED"}
    assert slurm_run["res"].returncode == 0, (
        f"workflow failed on SLURM (jobs not COMPLETED: {failed}):\n{out[-6000:]}")
    assert not failed
    results = Path(slurm_run["cfg"]["paths"]["results"]) / slurm_run["cfg"]["benchmark"]["name"]
    assert (results / "qrels_with_score.jsonl").stat().st_size > 0
    assert (results / "hf_dataset").is_dir()


def test_gres_request_style(slurm_run):
    """BENCHMAKER_SLURM_GPU_FLAG=gres: the GPU rule asks with --gres=gpu:1 and still gets gres/gpu."""
    cfg = slurm_run["cfg"]
    target = Path(cfg["paths"]["results"]) / cfg["benchmark"]["name"] / "embeddings" / "images" / "00000.parquet"
    if not target.exists():
        pytest.skip("the full run did not produce the embedding to re-run (see the test above)")
    res = _run(slurm_run["work"], slurm_run["config"], ["--force", str(target)],
               {"BENCHMAKER_SLURM_GPU_FLAG": "gres"})
    out = res.stdout + res.stderr
    subs = _submissions(out)
    assert [r for _, _, r in subs] == [GPU_RULE], out[-4000:]
    row = _wait_for_accounting([subs[0][1]])[subs[0][1]]
    assert re.search(r"gres/gpu=1\b", row["tres"]), row
    assert res.returncode == 0, out[-4000:]
    assert row["state"] == "COMPLETED"


def _allocations(workdir: Path) -> list[dict]:
    """sacct rows (allocations only) of every job submitted from ``workdir``."""
    out = subprocess.run(
        ["sacct", "-X", "-P", "-n", "--starttime", "now-1days", "-o",
         "JobIDRaw,Comment,State,Start,End,WorkDir"], capture_output=True, text=True, check=True).stdout
    rows = []
    for line in out.splitlines():
        job_id, comment, state, start, end, wd = line.split("|", 5)
        if Path(wd) == workdir:
            rows.append({"id": job_id, "comment": comment, "state": state, "start": start, "end": end})
    return rows


@pytest.mark.heavy
def test_controller_killed_during_a_gpu_job_is_survivable(slurm_cluster, tmp_path, tiny_corpus, tiny_clip):
    """kill -9 of the controller while a GPU job runs on the real SLURM, then at once the README's
    resume line: the new controller cancels the dead one's jobs that are still queued or running
    before it submits anything (and says how many), no two jobs for one output ever overlap in time
    (sacct), the run ends with the bytes of an uninterrupted run, and a later params change plans the
    same jobs as it does after the uninterrupted run (nothing finished unwatched is trusted)."""
    from support_runs import EPOCH, digests

    from benchmaker.slurm import previous_jobs

    env = {"SOURCE_DATE_EPOCH": EPOCH}
    # the uninterrupted run (local: same bytes whatever the executor)
    base = tmp_path / "base"
    base.mkdir()
    base_cfg = base / "config.yaml"
    support.write_config(base_cfg, support.tiny_config(base, tiny_corpus, tiny_clip))
    res = support.snakemake(["--cores", "2"], base, base_cfg, env=env)
    assert res.returncode == 0, (res.stdout + res.stderr)[-4000:]

    work = tmp_path / "killed"
    work.mkdir()
    cfg = support.tiny_config(work, tiny_corpus, tiny_clip)  # vision with CLIP: vision and embed_images get a GPU
    config = support.write_config(work / "config.yaml", cfg)
    cmd, e = _command(work, config, [], env)
    log = open(tmp_path / "first.log", "w")
    first = subprocess.Popen(cmd, cwd=ROOT, env=e, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    deadline, gpu = time.monotonic() + 600, None
    while time.monotonic() < deadline and first.poll() is None and gpu is None:
        time.sleep(0.5)
        gpu = next((j for j in previous_jobs(str(work))
                    if j.rule in ("vision", GPU_RULE) and j.state == "RUNNING"), None)
    assert gpu is not None, (tmp_path / "first.log").read_text()[-4000:]
    os.killpg(first.pid, signal.SIGKILL)  # the controller dies; its SLURM jobs do not
    first.wait()
    log.close()
    orphans = {j.job_id: j for j in previous_jobs(str(work))}
    assert gpu.job_id in orphans

    # the README's resume line, at once
    unlock = _run(work, config, ["--unlock"], env)
    assert unlock.returncode == 0, (unlock.stdout + unlock.stderr)[-3000:]
    res = _run(work, config, [], env)
    out = res.stdout + res.stderr
    (tmp_path / "resumed.log").write_text(out)
    assert res.returncode == 0, out[-6000:]
    m = re.search(r"benchmaker: (\d+) SLURM job\(s\) of a previous controller of this build still queued or "
                  r"running in (\S+) \(([^)]*)\): cancelling them before submitting anything; their outputs "
                  r"are remade \(job ids ([\d ]+)\)", out)
    assert m, out[-6000:]
    cancelled = set(m.group(4).split())
    assert int(m.group(1)) == len(cancelled) and gpu.job_id in cancelled and cancelled <= set(orphans)
    assert Path(m.group(2)) == work

    resumed = {slurm_id for _, slurm_id, _ in _submissions(out)}
    deadline = time.monotonic() + 60
    while True:  # accounting may lag the end of the run by a moment
        rows = _allocations(work)
        by_id = {r["id"]: r for r in rows}
        if resumed | set(orphans) <= set(by_id) or time.monotonic() > deadline:
            break
        time.sleep(2)
    assert by_id[gpu.job_id]["state"].startswith("CANCELLED"), by_id[gpu.job_id]
    # the same output never by two jobs at once: per output (rule + wildcards in the comment) the
    # jobs' run times never overlap (a job never started has Start "Unknown"/"None")
    ran = [r for r in rows if r["start"][:1].isdigit()]
    for comment in {r["comment"] for r in ran}:
        spans = sorted((r["start"], r["end"], r["id"]) for r in ran if r["comment"] == comment)
        for (_, end, a), (start, _, b) in zip(spans, spans[1:]):
            assert end[:1].isdigit() and end <= start, f"jobs {a} and {b} ran at once for {comment}: {spans}"
    # every output an orphan was making is remade by the new controller (cancelled or finished
    # unwatched: either way it was left marked incomplete)
    remade = {by_id[i]["comment"] for i in resumed}
    assert {by_id[i]["comment"] for i in orphans} <= remade, (orphans, remade)

    results = Path(cfg["paths"]["results"]) / cfg["benchmark"]["name"]
    assert digests(results) == digests(base / "results" / "tiny")

    # a params change after the resume plans the same jobs as after the uninterrupted run
    change = {"vision": {"clip": {"prompt_template": "a picture of {}."}}}
    config2 = support.write_config(work / "config2.yaml", support.tiny_config(work, tiny_corpus, tiny_clip, **change))
    base_cfg2 = support.write_config(base / "config2.yaml", support.tiny_config(base, tiny_corpus, tiny_clip, **change))
    dry = _run(work, config2, ["-n"], env)
    dry_base = support.snakemake(["-n", "--cores", "2"], base, base_cfg2, env=env)
    stats, stats_base = support.job_stats(dry.stdout + dry.stderr), support.job_stats(dry_base.stdout + dry_base.stderr)
    assert stats_base.get("vision") == cfg["n_shards"], stats_base
    assert stats == stats_base, (stats, stats_base)

    # a job that finishes while no controller watches is remade, not trusted: the controller dies
    # during a lone GPU job, the job ends COMPLETED on its own, and the next plan remakes its output
    # (before keep_job_incomplete_marks the job's own Snakemake unmarked it: it looked finished)
    target = results / "embeddings" / "images" / "00000.parquet"
    cmd, e = _command(work, config, ["--force", str(target)], env)
    log = open(tmp_path / "lone.log", "w")
    lone = subprocess.Popen(cmd, cwd=ROOT, env=e, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    deadline, job = time.monotonic() + 300, None
    while time.monotonic() < deadline and lone.poll() is None and job is None:
        time.sleep(0.5)
        job = next((j for j in previous_jobs(str(work)) if j.rule == GPU_RULE and j.state == "RUNNING"), None)
    assert job is not None, (tmp_path / "lone.log").read_text()[-4000:]
    os.killpg(lone.pid, signal.SIGKILL)
    lone.wait()
    log.close()
    deadline = time.monotonic() + 300
    while previous_jobs(str(work)) and time.monotonic() < deadline:
        time.sleep(1)
    assert _wait_for_accounting([job.job_id])[job.job_id]["state"] == "COMPLETED"
    assert _run(work, config, ["--unlock"], env).returncode == 0
    dry = _run(work, config, ["-n"], env)
    assert support.job_stats(dry.stdout + dry.stderr).get(GPU_RULE) == 1, (dry.stdout + dry.stderr)[-4000:]
