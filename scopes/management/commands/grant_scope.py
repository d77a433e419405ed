from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from scopes.access import Access, OperatorGrant
from scopes.models import Scope


class Command(BaseCommand):
    help = (
        "Gives a staff user access to a scope's operator pages and admin rows: view, act (approve, reject, "
        "purge) or configure (thresholds and settings). --revoke takes it away."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument("username")
        parser.add_argument(
            "--scope", action="append", required=True, dest="scopes", help="a scope slug; repeat for more"
        )
        parser.add_argument("--access", choices=[a.name.lower() for a in Access], default="view")
        parser.add_argument("--revoke", action="store_true")
        parser.add_argument(
            "--create-staff",
            action="store_true",
            help="make the user (staff, no usable password until `manage.py changepassword`) if there is none",
        )

    def handle(
        self, *args, username: str, scopes: list[str], access: str, revoke: bool, create_staff: bool, **options
    ) -> None:
        # Every scope first: a refused command makes no user.
        found = {s.slug: s for s in Scope.objects.filter(slug__in=scopes)}
        missing = [slug for slug in scopes if slug not in found]
        if missing:
            raise CommandError(f"no such scope: {', '.join(missing)}")
        user = get_user_model().objects.filter(username=username).first()
        if user is None and create_staff and not revoke:
            user = get_user_model().objects.create_user(username, is_staff=True)  # no usable password yet
            self.stdout.write(f"{username}: made, staff; set a password with `manage.py changepassword {username}`")
        if user is None:
            raise CommandError(f"no such user: {username!r} (--create-staff makes one)")
        if not user.is_staff and not revoke:
            raise CommandError(
                f"{username!r} is not staff: the operator pages are for staff users (set is_staff first)"
            )
        for scope in found.values():
            if revoke:
                OperatorGrant.objects.filter(user=user, scope=scope).delete()
                self.stdout.write(f"{username}: no access to {scope.slug}")
            else:
                OperatorGrant.objects.update_or_create(
                    user=user, scope=scope, defaults={"access": Access[access.upper()]}
                )
                self.stdout.write(f"{username}: {access} on {scope.slug}")
