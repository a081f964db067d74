"""`offsetd configs`: SCRAM user management like kafka-configs.sh (`--entity-type users`), through
AlterUserScramCredentials / DescribeUserScramCredentials (confluent-kafka salts and hashes the
password on the client, as Kafka's protocol does: only SaltedPassword crosses the wire), and the
first admin's credential written before the broker ever runs, like `kafka-storage.sh format
--add-scram`:

    offsetd configs --bootstrap-server H:P [--command-config F] --entity-type users --entity-name alice \\
        --alter --add-config 'SCRAM-SHA-256=[iterations=8192,password=s],SCRAM-SHA-512=[password=s]'
    offsetd configs ... --entity-type users --entity-name alice --alter --delete-config SCRAM-SHA-256
    offsetd configs ... --entity-type users [--entity-name alice] --describe
    offsetd configs --log-dirs DIR | --config server.properties --add-scram 'SCRAM-SHA-256=[name=admin,password=s]'

The offline form stores only derived keys in `<log.dirs>/security/scram-credentials.json` (local
mode); run it while the broker is stopped (a running broker keeps its own copy and would overwrite
the file on its next credential change). Other entity types and quota configs are not served.
Exit status: 0 ok, 1 the cluster refused or failed, 2 bad input."""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

from confluent_kafka.admin import (ScramCredentialInfo, ScramMechanism, UserScramCredentialDeletion,
                                   UserScramCredentialUpsertion)

from .connection import AdminConnection
from .client_config import build_client_config
from .configs import (ScramUpsert, derive_keys, format_describe, new_salt, parse_add_config, parse_add_scram,
                      parse_delete_config)
from .errors import ToolError, ToolParser, UsageError
from .output import Output

_MECHANISM_ENUM = {"SCRAM-SHA-256": ScramMechanism.SCRAM_SHA_256, "SCRAM-SHA-512": ScramMechanism.SCRAM_SHA_512}


def build_parser() -> argparse.ArgumentParser:
    """kafka-configs.sh's options for users' SCRAM credentials, plus the offline --add-scram."""
    p = ToolParser(prog="offsetd configs", description="SCRAM credentials of users (kafka-configs.sh compatible; "
                "works against any Kafka cluster), and the first admin's credential before the broker runs.")
    p.add_argument("--bootstrap-server", metavar="HOST:PORT", help="the server(s) to connect to")
    p.add_argument("--command-config", metavar="FILE", help="properties file with client configs (security etc.)")
    p.add_argument("--entity-type", help="users (the only type served)")
    p.add_argument("--entity-name", "--user", dest="entity_name", metavar="NAME", help="the user name")
    action = p.add_mutually_exclusive_group()
    action.add_argument("--alter", dest="action", action="store_const", const="alter", help="change credentials")
    action.add_argument("--describe", dest="action", action="store_const", const="describe", help="list credentials")
    p.add_argument("--add-config", metavar="CONFIG", help="'SCRAM-SHA-256=[iterations=8192,password=s],...' "
                   "(iterations default 4096)")
    p.add_argument("--delete-config", metavar="MECHANISMS", help="'SCRAM-SHA-256[,SCRAM-SHA-512]'")
    p.add_argument("--log-dirs", metavar="DIR", help="offline: the broker's log.dirs (the first is used)")
    p.add_argument("--config", metavar="FILE", help="offline: the broker's server.properties (for log.dirs)")
    p.add_argument("--add-scram", action="append", default=[], metavar="MECH=[name=N,password=P]",
                   help="offline: store a credential in the broker's data dir (repeatable; iterations=, salt= "
                        "(base64) optional)")
    p.add_argument("--timeout", type=int, metavar="MS", default=10000, help="timeout of each request (default 10000)")
    p.add_argument("--output", choices=("text", "json"), default="text", help="json: one JSON document on stdout")
    return p


def _offline_log_dir(args: argparse.Namespace) -> Path:
    """The data dir of the offline form: --log-dirs, or log.dirs of --config (local mode only)."""
    if bool(args.log_dirs) == bool(args.config):
        raise UsageError("--add-scram needs exactly one of --log-dirs and --config")
    if args.log_dirs:
        return Path(args.log_dirs.split(",")[0]).expanduser()
    from ..config import BrokerConfig, ConfigError

    try:
        config = BrokerConfig.load(args.config, [])
    except ConfigError as exc:
        raise UsageError(str(exc)) from None
    engine = str(config.get("storage.engine") or "")
    if engine.startswith("postgres"):
        raise UsageError("--add-scram writes a local broker's data dir; in cluster mode (storage.engine="
                         "postgresql) add users with --bootstrap-server as a super user")
    return config.log_dir


def bootstrap_credentials(log_dir: Path, upserts: list[ScramUpsert]) -> None:
    """Store the credentials' derived keys in the local security store of `log_dir` (other users'
    credentials are kept)."""
    from ..storage.security_store import CredentialRow, LocalSecurityStore

    store = LocalSecurityStore(log_dir)
    store.load_now()
    rows = {}
    for upsert in upserts:
        salt = upsert.salt or new_salt()
        stored_key, server_key = derive_keys(upsert.mechanism, upsert.password, salt, upsert.iterations)
        rows[(upsert.user, upsert.mechanism)] = CredentialRow(salt, stored_key, server_key, upsert.iterations)
    asyncio.run(store.upsert_credentials(rows))


def validate(args: argparse.Namespace) -> str:
    """The mode of the run ("bootstrap", "alter" or "describe"); UsageError with one line."""
    if args.add_scram:
        if args.bootstrap_server or args.action:
            raise UsageError("--add-scram is offline: it takes no --bootstrap-server, --alter or --describe")
        return "bootstrap"
    if not args.bootstrap_server:
        raise UsageError("Missing required argument --bootstrap-server")
    if args.entity_type is None:
        raise UsageError("--entity-type must be specified (only users is served)")
    if args.entity_type not in ("users", "user"):
        raise UsageError(f"--entity-type {args.entity_type} is not served: only users (SCRAM credentials)")
    if args.action is None:
        raise UsageError("Command must include exactly one action: --alter, --describe")
    if args.timeout <= 0:
        raise UsageError("--timeout must be a positive number of milliseconds")
    if args.action == "alter":
        if not args.entity_name:
            raise UsageError("--entity-name must be specified with --alter of users")
        if not args.add_config and not args.delete_config:
            raise UsageError("At least one of --add-config or --delete-config must be specified with --alter")
    elif args.add_config or args.delete_config:
        raise UsageError("--add-config and --delete-config need --alter")
    return args.action


def alter(admin: AdminConnection, user: str, upserts: list[ScramUpsert], deletions: list[str], out: Output) -> int:
    """AlterUserScramCredentials for one user; kafka-configs' completion line."""
    changes: list[object] = [
        UserScramCredentialUpsertion(u.user, ScramCredentialInfo(_MECHANISM_ENUM[u.mechanism], u.iterations),
                                     u.password.encode("utf-8"))
        for u in upserts]
    changes += [UserScramCredentialDeletion(user, _MECHANISM_ENUM[m]) for m in deletions]
    admin.wait(admin.admin.alter_user_scram_credentials(changes, request_timeout=admin.timeout_s).values())
    out.text(f"Completed updating config for user {user}.\n")
    out.document({"user": user, "upserted": [u.mechanism for u in upserts], "deleted": deletions})
    return 0


def describe(admin: AdminConnection, user: str | None, out: Output) -> int:
    """DescribeUserScramCredentials (one user or all); a user without credentials prints nothing."""
    if user is None:
        found = admin.wait([admin.admin.describe_user_scram_credentials(request_timeout=admin.timeout_s)])[0]
    else:
        futures = admin.admin.describe_user_scram_credentials([user], request_timeout=admin.timeout_s)
        try:
            found = {user: admin.wait(futures.values())[0]}
        except ToolError as exc:
            if "RESOURCE_NOT_FOUND" not in str(exc):
                raise
            found = {}
    users = {}
    for name, description in sorted(found.items()):
        infos = [(info.mechanism.name.replace("_", "-"), info.iterations) for info in description.scram_credential_infos]
        users[name] = infos
        if infos:
            out.text(format_describe(name, infos))
    out.document({"users": {name: [{"mechanism": m, "iterations": i} for m, i in infos]
                            for name, infos in users.items()}})
    return 0


def main(argv: list[str]) -> int:
    """Run `offsetd configs ARGV`; returns the exit status (0 ok, 1 failed, 2 bad input)."""
    out = Output()
    try:
        args = build_parser().parse_args(argv)
        out = Output(json_mode=args.output == "json")
        mode = validate(args)
        if mode == "bootstrap":
            upserts = [parse_add_scram(text) for text in args.add_scram]
            log_dir = _offline_log_dir(args)
            bootstrap_credentials(log_dir, upserts)
            for u in upserts:
                out.text(f"Stored {u.mechanism} credential (iterations={u.iterations}) for user {u.user} "
                         f"in {log_dir / 'security'}\n")
            out.document({"stored": [{"user": u.user, "mechanism": u.mechanism, "iterations": u.iterations}
                                     for u in upserts], "directory": str(log_dir / "security")})
            return 0
        upserts = parse_add_config(args.add_config, args.entity_name) if args.add_config else []
        deletions = parse_delete_config(args.delete_config) if args.delete_config else []
        both = {u.mechanism for u in upserts} & set(deletions)
        if both:
            raise UsageError(f"{sorted(both)[0]} is both added and deleted")
        admin = AdminConnection(build_client_config(args.bootstrap_server, args.command_config), args.timeout / 1000)
        if mode == "alter":
            return alter(admin, args.entity_name, upserts, deletions, out)
        return describe(admin, args.entity_name, out)
    except SystemExit as exc:  # --help
        return exc.code if isinstance(exc.code, int) else 0
    except UsageError as exc:
        sys.stderr.write(f"offsetd configs: {exc}\n")
        return 2
    except ToolError as exc:
        # Kafka echoes the arguments here; they hold passwords, so offsetd does not
        out.message(f"Error while executing config command: {exc}\n")
        out.document({"error": str(exc)})
        return 1
