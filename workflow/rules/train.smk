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
