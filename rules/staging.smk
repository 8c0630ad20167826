# Staging: the controller copies a file (folder) that the config names on its own disk into the
# workflow's storage, once; jobs read the copy. Only with a default storage provider (--profile nrp),
# where workflow_input() (rules/cluster.smk) asks for these outputs; never part of a local or SLURM run.


rule stage_file:
    input:
        source=_stage_sources,
    output:
        staged=f"{RESULTS}/inputs/file/{{key}}/{{name}}",
    log:
        f"{LOGS}/stage/file-{{key}}-{{name}}.log",
    wildcard_constraints:
        key=r"[0-9a-f]{12}",
        name=r"[^/]+",
    localrule: True
    conda:
        "../envs/benchmaker.yaml"
    params:
        folder=False,
        version=stage_version("staging"),
    script:
        "../scripts/stage.py"


rule stage_folder:
    input:
        source=_stage_sources,
    output:
        staged=directory(f"{RESULTS}/inputs/dir/{{key}}/{{name}}"),
    log:
        f"{LOGS}/stage/dir-{{key}}-{{name}}.log",
    wildcard_constraints:
        key=r"[0-9a-f]{12}",
        name=r"[^/]+",
    localrule: True
    conda:
        "../envs/benchmaker.yaml"
    params:
        folder=True,
        version=stage_version("staging"),
    script:
        "../scripts/stage.py"
