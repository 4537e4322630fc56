"""The crowd platforms, one package each, behind `app.crowd.registry`.

A platform's package holds its client of the platform's API, its `CrowdProvider`
(`provider`), its fee rule (`fees`, where it charges) and its declaration (`platform`:
capabilities and hooks, `app.crowd.platform`). Only a platform's own package names it.
"""
