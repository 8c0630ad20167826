"""Judge audit: how far the judge's labels agree with people and with another judge (docs/audit.md).

* ``sample``     the stratified, deterministic audit sample (rule ``audit_sample``)
* ``labelling``  the offline labelling page, Label Studio tasks + config, a CSV (rule ``audit_labelling``)
* ``judge2``     a second judge configuration over the sample or the whole benchmark (rule ``audit_judge2``)
* ``labels``     import and validation of human label files (page export, CSV, Label Studio export)
* ``agreement``  raw agreement, Cohen's / Fleiss' kappa, Krippendorff's alpha, bootstrap intervals
* ``ranking``    do the judge's mistakes change which system wins (ranx metrics, Kendall tau)
* ``statistics`` rule ``audit_report``: every audit number, written to ``audit/report/``
* ``render``     the audit section of the summary report and the dataset card, the files it publishes

Nothing here imports torch or Snakemake.
"""
