"""`offsetd acls` / `offsetd configs` / `--command-config` without a broker: kafka-acls' option
rules and conveniences (reference §3), its output text, kafka-configs' SCRAM syntax, the offline
credential bootstrap (checked against scramp as the oracle), and the Java security properties
translated for confluent-kafka and kafka-python."""

from __future__ import annotations

import json

import pytest
import scramp

from offsetd.admin.acls import (AccessEntry, Acl, AclOperation, AclPermission, PatternType, ResourcePattern,
                                ResourceType, bindings_to_add, filters_to_remove, format_acls, format_listing)
from offsetd.admin.acls_cli import build_parser, main as acls_main, validate
from offsetd.admin.client_config import build_client_config, kafka_python_config, translate_java_properties
from offsetd.admin.configs import (derive_keys, format_describe, parse_add_config, parse_add_scram,
                                   parse_delete_config, split_config)
from offsetd.admin.configs_cli import main as configs_main
from offsetd.admin.errors import UsageError
from offsetd.dev.certs import KEYSTORE_PASSWORD, write_certs

O, T, G, C, X = AclOperation, ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER, ResourceType.TRANSACTIONAL_ID
LIT, PRE = PatternType.LITERAL, PatternType.PREFIXED


def request(*argv: str):
    return validate(build_parser().parse_args(["--bootstrap-server", "h:1", *argv]))


def flat(plan) -> set[tuple]:
    """{(type, name, pattern, principal, host, op, permission)} of a plan."""
    return {(r.resource_type, r.name, r.pattern_type, e.principal, e.host, e.operation, e.permission)
            for r, entries in plan.items() for e in entries}


def test_consumer_convenience_is_topic_read_describe_and_group_read() -> None:
    plan = bindings_to_add(request("--add", "--allow-principal", "User:alice", "--consumer", "--topic", "orders",
                                   "--group", "app"))
    allow = AclPermission.ALLOW
    assert flat(plan) == {(T, "orders", LIT, "User:alice", "*", O.READ, allow),
                          (T, "orders", LIT, "User:alice", "*", O.DESCRIBE, allow),
                          (G, "app", LIT, "User:alice", "*", O.READ, allow)}


def test_producer_convenience_with_idempotent_and_transactional_id() -> None:
    plan = bindings_to_add(request("--add", "--allow-principal", "User:bob", "--producer", "--topic", "t",
                                   "--idempotent", "--transactional-id", "tx", "--allow-host", "10.0.0.1"))
    allow = AclPermission.ALLOW
    assert flat(plan) == {
        (T, "t", LIT, "User:bob", "10.0.0.1", O.WRITE, allow), (T, "t", LIT, "User:bob", "10.0.0.1", O.DESCRIBE, allow),
        (T, "t", LIT, "User:bob", "10.0.0.1", O.CREATE, allow),
        (C, "kafka-cluster", LIT, "User:bob", "10.0.0.1", O.IDEMPOTENT_WRITE, allow),
        (X, "tx", LIT, "User:bob", "10.0.0.1", O.WRITE, allow), (X, "tx", LIT, "User:bob", "10.0.0.1", O.DESCRIBE, allow)}


def test_operations_are_kafka_names_case_insensitive_and_default_to_all() -> None:
    req = request("--add", "--allow-principal", "User:a", "--operation", "DescribeConfigs", "--operation", "read",
                  "--operation", "ALTER_CONFIGS", "--topic", "t")
    assert req.operations == [O.DESCRIBE_CONFIGS, O.READ, O.ALTER_CONFIGS]
    assert request("--add", "--allow-principal", "User:a", "--cluster").operations == [O.ALL]
    with pytest.raises(UsageError, match="Invalid value 'reed' for --operation"):
        request("--add", "--allow-principal", "User:a", "--operation", "reed", "--topic", "t")


def test_prefixed_pattern_deny_principal_and_hosts() -> None:
    plan = bindings_to_add(request("--add", "--deny-principal", "User:eve", "--deny-host", "1.2.3.4", "--deny-host",
                                   "5.6.7.8", "--operation", "Read", "--group", "app-",
                                   "--resource-pattern-type", "PREFIXED"))
    assert flat(plan) == {(G, "app-", PRE, "User:eve", h, O.READ, AclPermission.DENY) for h in ("1.2.3.4", "5.6.7.8")}


@pytest.mark.parametrize("argv, message", [
    (["--add", "--topic", "t"], "You must specify one of: --allow-principal, --deny-principal"),
    (["--add", "--allow-principal", "User:a"], "You must provide at least one resource"),
    (["--add", "--allow-principal", "alice", "--topic", "t"], "expected Type:name"),
    (["--add", "--allow-principal", "User:a", "--topic", "t", "--resource-pattern-type", "match"],
     "'match' is not valid when adding acls"),
    (["--add", "--allow-principal", "User:a", "--consumer", "--topic", "t"], "With --consumer you must specify"),
    (["--add", "--allow-principal", "User:a", "--producer", "--group", "g"], "With --producer you must specify a --topic"),
    (["--add", "--allow-principal", "User:a", "--operation", "IdempotentWrite", "--topic", "t"],
     "ResourceType TOPIC only supports operations"),
    (["--add", "--allow-principal", "User:a", "--operation", "Write", "--group", "g"],
     "ResourceType GROUP only supports operations"),
    (["--add", "--allow-host", "1.1.1.1", "--topic", "t"], "--allow-host can only be used with --allow-principal"),
    (["--add", "--allow-principal", "User:a", "--topic", "t", "--idempotent"], "--idempotent can only be used"),
    (["--topic", "t"], "exactly one action"),
    (["--add", "--list", "--topic", "t"], "not allowed with argument"),
    (["--remove", "--allow-principal", "User:a"], "You must provide at least one resource"),
])
def test_option_errors(argv: list[str], message: str) -> None:
    with pytest.raises(UsageError, match=message):
        req = request(*argv)
        bindings_to_add(req) if "--add" in argv else filters_to_remove(req)


def test_usage_error_exits_2_with_one_line(capsys) -> None:
    assert acls_main(["--bootstrap-server", "h:1", "--add", "--topic", "t"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("offsetd acls: You must specify one of")


def test_remove_without_principal_removes_every_acl_of_the_resources() -> None:
    filters = filters_to_remove(request("--remove", "--topic", "t", "--group", "g", "--force"))
    assert filters == {ResourcePattern(T, "t", LIT): None, ResourcePattern(G, "g", LIT): None}


def test_output_matches_kafka_acls() -> None:
    resource = ResourcePattern(T, "t", LIT)
    entries = [AccessEntry("User:bob", "*", O.WRITE, AclPermission.ALLOW),
               AccessEntry("User:alice", "*", O.READ, AclPermission.ALLOW)]
    assert format_acls("Current ACLs", resource, entries) == (
        "Current ACLs for resource `ResourcePattern(resourceType=TOPIC, name=t, patternType=LITERAL)`: \n"
        " \t(principal=User:alice, host=*, operation=READ, permissionType=ALLOW)\n"
        "\t(principal=User:bob, host=*, operation=WRITE, permissionType=ALLOW) \n\n")
    acls = [Acl(resource, e) for e in entries] + [Acl(ResourcePattern(C, "kafka-cluster", LIT), entries[1])]
    listing = format_listing(acls)
    assert listing.index("resourceType=CLUSTER, name=kafka-cluster") < listing.index("resourceType=TOPIC")
    only_alice = format_listing(acls, ["User:alice"])
    assert only_alice.startswith("ACLs for principal `User:alice`\n") and "User:bob" not in only_alice


# --- configs ---------------------------------------------------------------------------------


def test_add_config_syntax() -> None:
    assert split_config("a=1,b=[x=1,y=2],c=3") == [("a", "1"), ("b", "x=1,y=2"), ("c", "3")]
    ups = parse_add_config("SCRAM-SHA-256=[iterations=8192,password=s=1],SCRAM-SHA-512=[password=p]", "alice")
    assert [(u.user, u.mechanism, u.iterations, u.password) for u in ups] == [
        ("alice", "SCRAM-SHA-256", 8192, "s=1"), ("alice", "SCRAM-SHA-512", 4096, "p")]
    assert parse_delete_config("SCRAM-SHA-256,scram-sha-512") == ["SCRAM-SHA-256", "SCRAM-SHA-512"]
    for bad, message in [("SCRAM-SHA-256=[iterations=100,password=p]", "less than the minimum 4096"),
                         ("producer_byte_rate=1024", "Only SCRAM-SHA-256 and SCRAM-SHA-512"),
                         ("SCRAM-SHA-256=[iterations=5000]", "needs password"),
                         ("SCRAM-SHA-256=[password=p", "Unbalanced")]:
        with pytest.raises(UsageError, match=message):
            parse_add_config(bad, "alice")


def test_describe_line_matches_kafka_configs() -> None:
    assert format_describe("alice", [("SCRAM-SHA-512", 4096), ("SCRAM-SHA-256", 8192)]) == (
        "SCRAM credential configs for user-principal 'alice' are SCRAM-SHA-256=iterations=8192, "
        "SCRAM-SHA-512=iterations=4096\n")


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_derived_keys_equal_scramp(mechanism: str) -> None:
    salt = b"0123456789abcdef"
    _, stored, server, _ = scramp.ScramMechanism(mechanism).make_auth_info("pw-ü", iteration_count=4096, salt=salt)
    assert derive_keys(mechanism, "pw-ü", salt, 4096) == (stored, server)


def test_offline_add_scram_writes_the_store_and_keeps_other_users(tmp_path, capsys) -> None:
    assert configs_main(["--log-dirs", str(tmp_path), "--add-scram", "SCRAM-SHA-256=[name=admin,password=adm]"]) == 0
    assert configs_main(["--log-dirs", str(tmp_path), "--add-scram",
                         "SCRAM-SHA-512=[name=bob,password=b,iterations=8192]"]) == 0
    assert "Stored SCRAM-SHA-512 credential (iterations=8192) for user bob" in capsys.readouterr().out
    stored = json.loads((tmp_path / "security" / "scram-credentials.json").read_text())["users"]
    assert sorted(stored) == ["admin", "bob"] and stored["bob"]["SCRAM-SHA-512"]["iterations"] == 8192
    assert "adm" not in (tmp_path / "security" / "scram-credentials.json").read_text().replace("admin", "")
    from offsetd.storage.security_store import LocalSecurityStore

    _, creds = LocalSecurityStore(tmp_path).load_now()
    row = creds[("admin", "SCRAM-SHA-256")]
    assert derive_keys("SCRAM-SHA-256", "adm", row.salt, row.iterations) == (row.stored_key, row.server_key)
    assert (tmp_path / "security" / "scram-credentials.json").stat().st_mode & 0o077 == 0


def test_offline_add_scram_errors(tmp_path, capsys) -> None:
    assert configs_main(["--add-scram", "SCRAM-SHA-256=[name=a,password=p]"]) == 2
    assert configs_main(["--log-dirs", str(tmp_path), "--add-scram", "SCRAM-SHA-256=[password=p]"]) == 2
    assert configs_main(["--log-dirs", str(tmp_path), "--add-scram",
                         "SCRAM-SHA-256=[name=a,password=p,iterations=20000]"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err == ["offsetd configs: --add-scram needs exactly one of --log-dirs and --config",
                   "offsetd configs: --add-scram SCRAM-SHA-256 needs name=... and password=...",
                   "offsetd configs: Iterations 20000 is more than the maximum 16384 for SCRAM-SHA-256"]
    assert not (tmp_path / "security").exists()


def test_configs_usage_errors(capsys) -> None:
    base = ["--bootstrap-server", "h:1"]
    assert configs_main(base + ["--entity-type", "topics", "--describe"]) == 2
    assert configs_main(base + ["--entity-type", "users", "--alter", "--add-config", "SCRAM-SHA-256=[password=p]"]) == 2
    assert configs_main(base + ["--entity-type", "users", "--entity-name", "a", "--alter"]) == 2
    assert len(capsys.readouterr().err.splitlines()) == 3


# --- --command-config ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    return write_certs(tmp_path_factory.mktemp("certs"), {"alice": ("alice", "A")})


def test_java_sasl_ssl_properties_translate_for_both_libraries(tmp_path, certs) -> None:
    cert, key = certs.clients["alice"]
    pem = tmp_path / "alice.pem"
    pem.write_bytes(key.read_bytes() + cert.read_bytes())
    props = tmp_path / "client.properties"
    props.write_text(
        "security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required \\\n"
        '    username="alice" password="al\\"ice";\n'
        f"ssl.truststore.type=PEM\nssl.truststore.location={certs.ca}\n"
        f"ssl.keystore.type=PEM\nssl.keystore.location={pem}\n"
        "ssl.endpoint.identification.algorithm=\nssl.enabled.protocols=TLSv1.3\n")
    conf = build_client_config("h:9093", str(props))
    assert conf == {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "alice",
                    "sasl.password": 'al"ice', "ssl.ca.location": str(certs.ca),
                    "ssl.certificate.location": str(pem), "ssl.key.location": str(pem),
                    "ssl.endpoint.identification.algorithm": "none", "bootstrap.servers": "h:9093"}
    assert kafka_python_config(conf) == {
        "bootstrap_servers": "h:9093", "security_protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_plain_username": "alice", "sasl_plain_password": 'al"ice', "ssl_cafile": str(certs.ca),
        "ssl_certfile": str(pem), "ssl_keyfile": str(pem), "ssl_check_hostname": False}


def test_pkcs12_and_inline_pem_stores_become_files(certs) -> None:
    conf = translate_java_properties({
        "ssl.truststore.type": "PKCS12", "ssl.truststore.location": str(certs.truststore_p12),
        "ssl.truststore.password": KEYSTORE_PASSWORD,
        "ssl.keystore.type": "PEM", "ssl.keystore.key": certs.clients["alice"][1].read_text(),
        "ssl.keystore.certificate.chain": certs.clients["alice"][0].read_text()})
    assert open(conf["ssl.ca.location"]).read().startswith("-----BEGIN CERTIFICATE-----")
    assert open(conf["ssl.key.location"]).read() == certs.clients["alice"][1].read_text()
    assert open(conf["ssl.certificate.location"]).read() == certs.clients["alice"][0].read_text()


@pytest.mark.parametrize("props, message", [
    ({"ssl.truststore.location": "/x/truststore.jks"}, "ssl.truststore.type JKS is not supported .*keytool"),
    ({"ssl.keystore.type": "jks", "ssl.keystore.location": "/x/k.jks"}, "ssl.keystore.type JKS is not supported"),
    ({"ssl.keystore.type": "PEM", "ssl.keystore.location": "/x/k.pem", "ssl.keystore.password": "p"},
     "ssl.keystore.password is not allowed with ssl.keystore.type=PEM"),
    ({"ssl.truststore.type": "PKCS12", "ssl.truststore.location": "/nonexistent"}, "Cannot read ssl.truststore"),
])
def test_store_errors(props: dict[str, str], message: str) -> None:
    with pytest.raises(UsageError, match=message):
        translate_java_properties(props)


def test_offline_add_scram_reads_log_dirs_from_a_server_properties(tmp_path, capsys) -> None:
    props = tmp_path / "server.properties"
    props.write_text(f"log.dirs={tmp_path / 'd1'},{tmp_path / 'd2'}\n")
    assert configs_main(["--config", str(props), "--add-scram", "SCRAM-SHA-512=[name=admin,password=a]"]) == 0
    assert (tmp_path / "d1" / "security" / "scram-credentials.json").exists()
    assert not (tmp_path / "d2").exists()
    cluster = tmp_path / "cluster.properties"
    cluster.write_text(f"log.dirs={tmp_path / 'd3'}\nstorage.engine=postgresql://u@localhost/db\n")
    assert configs_main(["--config", str(cluster), "--add-scram", "SCRAM-SHA-512=[name=admin,password=a]"]) == 2
    assert "in cluster mode" in capsys.readouterr().err
    assert not (tmp_path / "d3").exists()
