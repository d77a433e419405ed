from django.core.management.base import BaseCommand, CommandError

from scopes.models import ApiKey, Scope


class Command(BaseCommand):
    help = "Creates an API key granting the given scopes and prints it alone on stdout, once."

    def add_arguments(self, parser) -> None:
        parser.add_argument(
            "--scope", action="append", required=True, dest="scopes", help="a scope slug; repeat for more"
        )
        parser.add_argument("--name", default="")
        parser.add_argument(
            "--no-section-writes",
            action="store_true",
            help="an agent's key: it asks, records and reports, but may not put, sync or delete sections",
        )

    def handle(self, *args, scopes: list[str], name: str, no_section_writes: bool = False, **options) -> None:
        found = {s.slug: s for s in Scope.objects.filter(slug__in=scopes)}
        missing = [slug for slug in scopes if slug not in found]
        if missing:
            raise CommandError(f"no such scope: {', '.join(missing)}")
        _, full_key = ApiKey.issue(found.values(), name=name, writes_sections=not no_section_writes)
        self.stdout.write(full_key)
