from django.contrib import admin
from django.urls import include, path
from django.views.generic import RedirectView

import ops.dashboard

# The ops dashboard (admin/ops/dashboard/), linked from the admin's index.
admin.site.index_template = "ops/admin/index.html"

urlpatterns = [
    path("admin/ops/", ops.dashboard.urls(admin.site)),
    path("admin/", admin.site.urls),
    path("", include("ops.urls")),
    path("reminders/", include("reminders.urls")),
    path("", RedirectView.as_view(url="/admin/", permanent=False)),
]
