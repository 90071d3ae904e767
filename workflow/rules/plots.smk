# Learning curves and throughput: one panel per env, one curve (mean +- std over seeds) per variant.
# A local rule: on a cluster it runs on the submit host; only training is submitted.
localrules:
    plots,


rule plots:
    input:
        tables=extracted_tables,
        summaries=extracted_summaries,
    output:
        returns=report(
            results("plots/sac.png"),
            caption="../report/sac_plot.rst",
            category="Plots",
        ),
        returns_by_time=report(
            results("plots/sac-time.png"),
            caption="../report/sac_time_plot.rst",
            category="Plots",
        ),
        sps=report(
            results("plots/sac-sps.png"),
            caption="../report/sac_sps_plot.rst",
            category="Plots",
        ),
        returns_svg=results("plots/sac.svg"),
        returns_by_time_svg=results("plots/sac-time.svg"),
        sps_svg=results("plots/sac-sps.svg"),
    log:
        results("logs/plots/plots.log"),
    conda:
        "../../envs/report.yaml"
    params:
        extracted_dir=extracted_dir,
        out_dir=plots_dir,
        selection=selection_flags(),
        allow_missing=allow_missing_flag(),
    shell:
        "python -m sacbench.report plots --extracted-dir {params.extracted_dir}"
        " {params.selection} --out-dir {params.out_dir} {params.allow_missing} > {log} 2>&1"
