"""A minimal Django site around Turkle (`pip install turkle` ships the app, not a site),
for tests/crowd/test_batch_turkle.py and for a researcher who wants Turkle without cloning its
repository (docs/crowd.md, "Turkle"). `python -m tests.crowd.turkle_site ...` runs
Django's management commands against it (`migrate`, `createsuperuser`, `runserver`)."""
