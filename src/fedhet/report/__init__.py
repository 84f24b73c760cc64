"""The finished HTML report: Snakemake's generated page with fedhet's title, its layout fixes
(workflow/report/report.css) and the provenance of the build (what it was built from)."""
