from django.contrib import admin
from django.urls import include, path
from django.views.generic import RedirectView

from infra.metrics import metrics_view

from . import health
from .api import api

urlpatterns = [
    path("", RedirectView.as_view(pattern_name="ops:index", permanent=False)),
    path("ops/", include("trails.urls")),
    path("admin/", admin.site.urls),
    path("api/v1/", api.urls),
    path("api/docs", RedirectView.as_view(url="/api/v1/docs", permanent=False)),
    path("metrics", metrics_view, name="metrics"),
    path("health/live", health.live, name="live"),
    path("health/ready", health.ready, name="ready"),
]

# Whatever raises, in any layer, an API path answers JSON (infra.errors.server_error).
handler500 = "infra.errors.server_error"
handler404 = "infra.errors.page_not_found"
handler400 = "infra.errors.bad_request"
