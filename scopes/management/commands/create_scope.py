from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError

from scopes.models import Scope


class Command(BaseCommand):
    help = "Creates a scope with the default settings (no prompts; exits non-zero if it exists)."

    def add_arguments(self, parser) -> None:
        parser.add_argument("slug")
        parser.add_argument("--name", default="")

    def handle(self, *args, slug: str, name: str, **options) -> None:
        if Scope.objects.filter(slug=slug).exists():
            raise CommandError(f"scope {slug!r} already exists")
        scope = Scope(slug=slug, name=name or slug)
        try:
            scope.full_clean()
        except ValidationError as invalid:
            problems = "; ".join(f"{field}: {' '.join(messages)}" for field, messages in invalid.message_dict.items())
            raise CommandError(f"scope {slug!r} refused: {problems}") from None
        scope.save()
        self.stdout.write(scope.slug)
