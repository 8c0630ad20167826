"""benchmaker.slurm: which queued/running SLURM jobs belong to a dead controller of this build (the
executor's jobs submitted from this working directory). The real SLURM run is in tests/test_slurm.py."""

from __future__ import annotations

from benchmaker.slurm import PreviousJob, parse_squeue

UUID = "0f3b8a52-9c1e-4d7a-8b2f-5e6d7c8a9b01"


def test_only_the_executors_jobs_from_this_folder(tmp_path):
    build, other = tmp_path / "build", tmp_path / "other"
    build.mkdir()
    other.mkdir()
    (tmp_path / "link").symlink_to(build)
    text = "\n".join([
        f"41|{UUID}|RUNNING|{build}|rule_vision_wildcards_00000",
        f"42|{UUID}|PENDING|{tmp_path / 'link'}|rule_vision_wildcards_00001",  # the same folder
        f"43|myprefix_{UUID}|COMPLETING|{build}|rule_plan",                   # --slurm-jobname-prefix
        f"44|{UUID}|RUNNING|{other}|rule_vision_wildcards_00000",             # another build
        f"45|my_analysis|RUNNING|{build}|rule_vision",                        # not Snakemake's name
        f"46|{UUID}|RUNNING|{build}|nightly backup",                          # not Snakemake's comment
        "garbage line",
    ])
    assert parse_squeue(text, str(build)) == [
        PreviousJob("43", "plan", "COMPLETING"),
        PreviousJob("41", "vision", "RUNNING"),
        PreviousJob("42", "vision", "PENDING"),
    ]
    assert [j.job_id for j in parse_squeue(text, str(other))] == ["44"]
