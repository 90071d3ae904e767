# One job per variant x env x seed. The output is the run's completion record, not the run dir,
# so a failed job keeps its checkpoints and the rerun resumes from them. Snakemake removes the
# record before it reruns a job; the trainer then restores it from a finished run's final state
# (nothing is retrained), resumes an unfinished run, or, with --overwrite, moves a run dir made
# with other run-defining args aside (never deletes it) and trains afresh (docs/contracts.md).
# Threads, memory and time come from here by default; profiles override them (set-threads,
# set-resources), and a `gpu` resource is added there by users who want GPUs.
rule train:
    output:
        complete=results("runs/{variant}/{env_id}/{seed}/complete.json"),
    log:
        results("logs/train/{variant}/{env_id}/{seed}.log"),
    wildcard_constraints:
        variant=one_of(TRAINER_VARIANTS),
    conda:
        "../../envs/train.yaml"
    threads: 1
    resources:
        mem_mb=train_mem_mb,
        runtime=train_runtime,
    params:
        run_dir=run_dir_of_output,
        trainer_flags=trainer_flags,
    shell:
        "python -m sacbench.train --env-id {wildcards.env_id} --seed {wildcards.seed}"
        " --exp-name {wildcards.variant} --run-dir {params.run_dir} --threads {threads}"
        " --overwrite {params.trainer_flags} > {log} 2>&1"


# A command variant's runs (config.yaml `variants: NAME: {command: ...}`): its own CleanRL-style
# script instead of the trainer, run in the run dir by python -m sacbench.run_command with
# --env-id, --seed and the variant's flags (docs/contracts.md, "Runs of an external command").
# Such runs cannot resume. When Snakemake reruns one, the wrapper restores the completion record
# of a finished run without running the script, moves an unfinished attempt's files into
# attempts/ in the run dir, and moves a run dir of another command line aside; it deletes
# nothing. Threads, memory and time as for train (the script gets the threads as OMP_NUM_THREADS).
rule run_command:
    output:
        complete=results("runs/{variant}/{env_id}/{seed}/complete.json"),
    log:
        results("logs/train/{variant}/{env_id}/{seed}.log"),
    wildcard_constraints:
        variant=one_of(COMMAND_VARIANTS),
    conda:
        "../../envs/train.yaml"
    threads: 1
    resources:
        mem_mb=train_mem_mb,
        runtime=train_runtime,
    params:
        run_dir=run_dir_of_output,
        command=command_line,
        args_json=command_args_json,
    shell:
        "python -m sacbench.run_command --run-dir {params.run_dir} --env-id {wildcards.env_id}"
        " --seed {wildcards.seed} --threads {threads} --args-json {params.args_json}"
        " -- {params.command} > {log} 2>&1"
