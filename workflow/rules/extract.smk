# A run's TensorBoard events -> a tidy table (tag, step, wall_time, value) plus a JSON summary
# of its metadata, offline, which records what the table holds (rows per tag, digests) for the
# reports to check. Reruns whenever the run's completion record is newer (the trainer rewrites it
# whenever it changes a finished run's records), and when the extraction's format changes (its
# param: an extraction of an older sacbench is made again), so no report reads a stale one.
# A local rule: on a cluster it runs on the submit host (reading one run; no allocation needed).
localrules:
    extract,


rule extract:
    input:
        complete=results("runs/{variant}/{env_id}/{seed}/complete.json"),
    output:
        table=results("extracted/{variant}/{env_id}/{seed}.csv"),
        summary=results("extracted/{variant}/{env_id}/{seed}.json"),
    log:
        results("logs/extract/{variant}/{env_id}/{seed}.log"),
    conda:
        "../../envs/report.yaml"
    params:
        run_dir=run_dir_of_input,
        extraction_format=EXTRACTION_FORMAT,
    shell:
        "python -m sacbench.report extract --run-dir {params.run_dir}"
        " --output {output.table} > {log} 2>&1"
