"""Include in the CRM's URLconf, e.g. ``path("reminders/", include("reminders.urls"))``:
``wecom/callback`` is the URL to enter as the app's callback in WeCom's admin console."""

from django.urls import path

from . import views

app_name = "reminders"

urlpatterns = [
    path("wecom/callback", views.wecom_callback, name="wecom-callback"),
]
