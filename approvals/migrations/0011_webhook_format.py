from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("approvals", "0010_email_deliveries"),
    ]

    operations = [
        migrations.AddField(
            model_name="webhooksubscription",
            name="format",
            field=models.CharField(
                choices=[
                    ("standard", "standard (signed JSON)"),
                    ("slack", "Slack incoming webhook"),
                    ("teams", "Teams incoming webhook (Adaptive Card)"),
                ],
                default="standard",
                help_text="Standard: the signed JSON event. Slack or Teams: a chat message for "
                "an incoming-webhook URL, linking to the request in the console.",
                max_length=16,
            ),
        ),
    ]
