"""`connector`: the delivery connector an Email campaign sends through (contract §5)."""

from __future__ import annotations

from enum import StrEnum

from herald.campaigns.schemas.common import NonEmptyText
from herald.schemas import APIModel


class ConnectorType(StrEnum):
    CUSTOM_SMTP = "CUSTOM_SMTP"
    CUSTOM_API = "CUSTOM_API"
    # Accepted as names of connectors configured in the workspace; Herald itself speaks SMTP and HTTPS.
    SENDGRID = "SENDGRID"
    AMAZON_SES = "AMAZON_SES"
    SPARKPOST = "SPARKPOST"
    MANDRILL = "MANDRILL"
    NETCORE = "NETCORE"


class Connector(APIModel):
    connector_type: ConnectorType
    connector_name: NonEmptyText
