"""Mechanical Turk (boto3): `client` (endpoints, retries, errors), `formats` (ExternalQuestion
and answer XML, qualification requirements, money strings), `fees`, `provider`
(`MTurkProvider`) and `platform` (its capabilities and steps)."""
