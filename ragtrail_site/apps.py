from django.apps import AppConfig


class SiteConfig(AppConfig):
    """The site: the top layer, which wires the lower ones together once Django is ready."""

    name = "ragtrail_site"
    verbose_name = "ragtrail site"

    def ready(self) -> None:
        from infra import metrics
        from infra.load_shedding import embedding_gate
        from trails.embedders import enter_inference_through, report_timings_to

        # The model is entered through the load gate in every process (web and worker).
        enter_inference_through(lambda what: embedding_gate().entered(what))
        report_timings_to(metrics.MODEL_LOAD_SECONDS.set, metrics.EMBEDDING_SECONDS.observe)
        metrics.count_task_runs()
