# The final evaluation of each task in video_env_ids, filmed in the first seed's run (the train
# rule passes it --capture-video), copied out of the run dir with an HTML page that plays it in
# the Snakemake report (which shows HTML inline but an MP4 only as a download). A run without
# its video is an error naming the run dir (sacbench.results.videos says what to do).
# A local rule: on a cluster it runs on the submit host (copying one file; no allocation needed).
localrules:
    video,


rule video:
    input:
        complete=filmed_run_completion,
    output:
        mp4=results("videos/{variant}/{env_id}.mp4"),
        page=report(
            results("videos/{variant}/{env_id}.html"),
            caption="../report/video.rst",
            category="Videos",
            subcategory="{variant}",
            labels={"variant": "{variant}", "task": "{env_id}"},
        ),
    log:
        results("logs/videos/{variant}/{env_id}.log"),
    conda:
        "../../envs/report.yaml"
    params:
        run_dir=run_dir_of_input,
    shell:
        "python -m sacbench.report video --run-dir {params.run_dir}"
        " --mp4 {output.mp4} --html {output.page} > {log} 2>&1"
