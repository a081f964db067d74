"""`offsetd acls`: kafka-acls.sh compatible tool to add, remove and list ACLs through the Admin API
(CreateAcls, DeleteAcls, DescribeAcls via confluent-kafka), so it works against any Kafka cluster.

Differences from kafka-acls.sh: offsetd never prompts (`--remove` behaves as with `--force`, which
is accepted and changes nothing); `--delegation-token`, `--user-principal` and `--bootstrap-controller`
are not offered (librdkafka's admin client has no USER or DELEGATION_TOKEN resource). Every input
error is one line on stderr and exit status 2; a refusal or failure of the cluster is exit status 1."""

from __future__ import annotations

import argparse
import sys

from .acls import (Acl, AclOperation, AclRequest, PatternType, ResourcePattern, acl_json, bindings_to_add,
                   filters_to_remove, format_acls, format_listing, list_filters, parse_enum, parse_principal)
from .acls_client import AclAdmin, to_binding, to_filter
from .client_config import build_client_config
from .errors import ToolError, ToolParser, UsageError
from .output import Output

ACTIONS = ("add", "remove", "list")


def build_parser() -> argparse.ArgumentParser:
    """kafka-acls.sh's options (plus --timeout and --output)."""
    p = ToolParser(prog="offsetd acls", description="Add, remove and list ACLs (kafka-acls.sh compatible; works "
                "against any Kafka cluster). offsetd never prompts: --remove acts as with --force.")
    p.add_argument("--bootstrap-server", metavar="HOST:PORT", help="REQUIRED: the server(s) to connect to")
    p.add_argument("--command-config", metavar="FILE", help="properties file with client configs (security etc.)")
    action = p.add_mutually_exclusive_group()
    for name in ACTIONS:
        action.add_argument(f"--{name}", dest="action", action="store_const", const=name,
                            help=f"{name} ACLs")
    p.add_argument("--topic", action="append", default=[], help="topic (repeatable; * for all topics)")
    p.add_argument("--group", action="append", default=[], help="consumer group (repeatable; * for all)")
    p.add_argument("--transactional-id", action="append", default=[], help="transactional id (repeatable)")
    p.add_argument("--cluster", action="store_true", help="the cluster resource (kafka-cluster)")
    p.add_argument("--resource-pattern-type", default=None, metavar="TYPE",
                   help="literal (default) or prefixed; --list/--remove also take any and match")
    p.add_argument("--allow-principal", action="append", default=[], metavar="TYPE:NAME")
    p.add_argument("--deny-principal", action="append", default=[], metavar="TYPE:NAME")
    p.add_argument("--allow-host", action="append", default=[], metavar="IP", help="default * with --allow-principal")
    p.add_argument("--deny-host", action="append", default=[], metavar="IP", help="default * with --deny-principal")
    p.add_argument("--principal", action="append", default=[], metavar="TYPE:NAME",
                   help="with --list: only the ACLs of this principal")
    p.add_argument("--operation", action="append", default=[], metavar="OP",
                   help="Read, Write, Create, Delete, Alter, Describe, ClusterAction, DescribeConfigs, "
                        "AlterConfigs, IdempotentWrite, All (default All; repeatable; case-insensitive)")
    p.add_argument("--producer", action="store_true", help="the ACLs of a producer of --topic")
    p.add_argument("--consumer", action="store_true", help="the ACLs of a consumer of --topic in --group")
    p.add_argument("--idempotent", action="store_true", help="with --producer: IDEMPOTENT_WRITE on the cluster")
    p.add_argument("--force", action="store_true", help="accepted for compatibility: offsetd never prompts")
    p.add_argument("--timeout", type=int, metavar="MS", default=10000, help="timeout of each request (default 10000)")
    p.add_argument("--output", choices=("text", "json"), default="text", help="json: one JSON document on stdout")
    return p


def validate(args: argparse.Namespace) -> AclRequest:
    """The option rules of kafka-acls; UsageError with one line."""
    if args.action is None:
        raise UsageError("Command must include exactly one action: --add, --remove, --list")
    if not args.bootstrap_server:
        raise UsageError("Missing required argument --bootstrap-server")
    if args.timeout <= 0:
        raise UsageError("--timeout must be a positive number of milliseconds")
    pattern = (PatternType.LITERAL if args.resource_pattern_type is None
               else parse_enum(PatternType, args.resource_pattern_type, "--resource-pattern-type"))
    if args.action == "add" and pattern in (PatternType.ANY, PatternType.MATCH):
        raise UsageError(f"A '--resource-pattern-type' value of '{pattern.name.lower()}' is not valid when adding acls.")
    if args.action == "list" and (args.producer or args.consumer or args.allow_principal or args.deny_principal):
        raise UsageError("--list takes no --producer, --consumer, --allow-principal or --deny-principal "
                         "(use --principal to select a principal)")
    if args.principal and args.action != "list":
        raise UsageError("--principal can only be used with --list")
    if args.idempotent and not args.producer:
        raise UsageError("--idempotent can only be used with --producer")
    if (args.producer or args.consumer) and args.operation:
        raise UsageError("--operation cannot be used with --producer or --consumer")
    if args.consumer and (args.cluster or (args.transactional_id and not args.producer)):
        raise UsageError("With --consumer you must specify a --topic and a --group and no --cluster or "
                         "--transactional-id option should be specified.")
    if args.allow_host and not args.allow_principal:
        raise UsageError("--allow-host can only be used with --allow-principal")
    if args.deny_host and not args.deny_principal:
        raise UsageError("--deny-host can only be used with --deny-principal")
    for name in args.topic + args.group + args.transactional_id:
        if not name:
            raise UsageError("A resource name must not be empty")
    return AclRequest(
        topics=list(dict.fromkeys(args.topic)), groups=list(dict.fromkeys(args.group)),
        transactional_ids=list(dict.fromkeys(args.transactional_id)), cluster=args.cluster, pattern_type=pattern,
        allow_principals=[parse_principal(p, "--allow-principal") for p in args.allow_principal],
        deny_principals=[parse_principal(p, "--deny-principal") for p in args.deny_principal],
        allow_hosts=list(args.allow_host), deny_hosts=list(args.deny_host),
        operations=list(dict.fromkeys(parse_enum(AclOperation, o, "--operation") for o in args.operation))
        or [AclOperation.ALL],
        producer=args.producer, consumer=args.consumer, idempotent=args.idempotent,
        principal_filter=[parse_principal(p, "--principal") for p in args.principal] or None)


def _list(admin: AclAdmin, req: AclRequest, filters: list[ResourcePattern]) -> list[Acl]:
    """The ACLs of every filter (deduplicated: MATCH filters may overlap)."""
    found: dict[Acl, None] = {}
    for resource in filters:
        found.update(dict.fromkeys(admin.describe(to_filter(resource, None))))
    return list(found)


def run(admin: AclAdmin, action: str, req: AclRequest, out: Output) -> int:
    """Perform the action and print kafka-acls' text (or the JSON document)."""
    if action == "add":
        plan = bindings_to_add(req)
        for resource, entries in plan.items():
            out.text(format_acls("Adding ACLs", resource, entries))
        admin.create([to_binding(r, e) for r, entries in plan.items() for e in entries])
        current = _list(admin, req, list(plan))
        out.text(format_listing(current))
        out.document({"added": [acl_json(Acl(r, e)) for r, entries in plan.items() for e in entries],
                      "current": [acl_json(a) for a in current]})
        return 0
    if action == "remove":
        removal = filters_to_remove(req)
        filters = [to_filter(r, e) for r, entries in removal.items() for e in (entries or [None])]
        removed = admin.delete(filters)
        current = _list(admin, req, list(removal))
        out.text(format_listing(current))
        out.document({"removed": [acl_json(a) for a in removed], "current": [acl_json(a) for a in current]})
        return 0
    acls = _list(admin, req, list_filters(req))
    out.text(format_listing(acls, req.principal_filter))
    if req.principal_filter:
        acls = [a for a in acls if a.entry.principal in req.principal_filter]
    out.document({"acls": [acl_json(a) for a in acls]})
    return 0


def main(argv: list[str]) -> int:
    """Run `offsetd acls ARGV`; returns the exit status (0 ok, 1 failed, 2 bad input)."""
    out = Output()
    try:
        args = build_parser().parse_args(argv)
        out = Output(json_mode=args.output == "json")
        req = validate(args)
        if args.action == "add":
            bindings_to_add(req)  # input errors before connecting
        elif args.action == "remove":
            filters_to_remove(req)
        admin = AclAdmin(build_client_config(args.bootstrap_server, args.command_config), args.timeout / 1000)
        return run(admin, args.action, req, out)
    except SystemExit as exc:  # --help
        return exc.code if isinstance(exc.code, int) else 0
    except UsageError as exc:
        sys.stderr.write(f"offsetd acls: {exc}\n")
        return 2
    except ToolError as exc:
        out.message(f"Error while executing ACL command: {exc}\n")
        out.document({"error": str(exc)})
        return 1
