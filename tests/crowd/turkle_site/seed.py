"""`python -m tests.crowd.turkle_site.seed TEMPLATE USER:PASSWORD...`: an admin (the first
user) and workers, and a Turkle project whose HIT template is the file TEMPLATE, as is.
Prints the project's id. The batch itself is uploaded through Turkle's admin page."""

import os
import sys
from pathlib import Path

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.crowd.turkle_site.settings")

import django

django.setup()

from django.contrib.auth.models import User  # noqa: E402
from turkle.models import Project  # noqa: E402


def main(template: Path, users: list[str]) -> None:
    (admin_name, admin_password), *workers = [u.split(":", 1) for u in users]
    admin = User.objects.create_superuser(admin_name, password=admin_password)
    for name, password in workers:
        User.objects.create_user(name, password=password)
    project = Project(
        name="Guess the next word",
        html_template=template.read_text(encoding="utf-8"),
        filename=template.name,
        created_by=admin,
        updated_by=admin,
        login_required=True,
    )
    project.full_clean()  # as Turkle's admin does: reads the template's ${fields}
    project.save()
    print(project.id)


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2:])
