from django.apps import AppConfig


class TrailsConfig(AppConfig):
    name = "trails"
    verbose_name = "Trails"
