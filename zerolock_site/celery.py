import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "zerolock_site.settings")

app = Celery("zerolock")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
