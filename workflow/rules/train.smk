# One job per variant x env x seed. The output is the run's completion record, not the run dir,
# so a failed job keeps its checkpoints and the rerun resumes from them. --overwrite is safe:
# Snakemake only starts this job when the record is missing or its params changed, and the
# trainer then moves a stale or finished run dir aside (never deletes it) and trains afresh.
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
