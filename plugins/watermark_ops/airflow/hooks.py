"""The webhook connection type of :class:`watermark_ops.airflow.notifiers.WatermarkWebhookNotifier`.

:class:`WatermarkWebhookHook` gives the connection type ``watermark_ops_webhook`` (declared in the
provider info, so the Airflow UI offers its form) and resolves a connection to the URL and headers
the notifier posts to (:func:`watermark_ops.airflow.notifiers.webhook_request`). The notifier reads
any connection with a host, so an ``http`` connection (apache-airflow-providers-http) works as well.
"""

from __future__ import annotations

from typing import Any

from airflow.sdk import BaseHook

__all__ = ["WatermarkWebhookHook"]


class WatermarkWebhookHook(BaseHook):
    """A webhook URL (host, schema, port, ``extra.endpoint``, ``extra.headers``) and an optional bearer token.

    :param webhook_conn_id: the connection id (default ``watermark_ops_webhook``).
    """

    conn_name_attr = "webhook_conn_id"
    default_conn_name = "watermark_ops_webhook"
    conn_type = "watermark_ops_webhook"
    hook_name = "Watermark webhook"

    def __init__(self, webhook_conn_id: str = default_conn_name, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.webhook_conn_id = webhook_conn_id

    @classmethod
    def get_ui_field_behaviour(cls) -> dict[str, Any]:
        """The connection form: no login; the password is sent as a bearer token."""
        return {
            "hidden_fields": ["login"],
            "relabeling": {"host": "Host or URL", "password": "Bearer token"},
            "placeholders": {"host": "alerts.example.com", "schema": "https",
                             "extra": '{"endpoint": "/hooks/watermarks", "headers": {"X-Team": "data"}}'},
        }

    def get_conn(self) -> tuple[str, dict[str, str]]:
        """``(url, headers)`` of the connection (:func:`watermark_ops.airflow.notifiers.webhook_request`).

        :raises ValueError: when the connection has no host.
        """
        from watermark_ops.airflow.notifiers import webhook_request

        return webhook_request(self.get_connection(self.webhook_conn_id))
