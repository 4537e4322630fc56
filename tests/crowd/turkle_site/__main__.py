"""`python -m tests.crowd.turkle_site COMMAND ...`: Django's manage.py for this site."""

import os
import sys

from django.core.management import execute_from_command_line

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.crowd.turkle_site.settings")
execute_from_command_line(["turkle_site", *sys.argv[1:]])
