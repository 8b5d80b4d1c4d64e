from django.apps import AppConfig


class ShardsConfig(AppConfig):
    name = "shards"
    verbose_name = "Shards"
