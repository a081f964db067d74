"""Listener and security keys: several named listeners, the protocol map, `listener.name.<l>.`
overrides, advertised endpoints per listener, SASL mechanisms, and one-line errors naming the key."""

from __future__ import annotations

import pytest

from offsetd.config import BrokerConfig, ConfigError
from offsetd.config_keys import Listener

JAAS = 'org.apache.kafka.common.security.plain.PlainLoginModule required user_a="b";'


def test_default_is_one_plaintext_listener() -> None:
    config = BrokerConfig()
    assert config.listeners == (Listener("PLAINTEXT", "127.0.0.1", 9092),)
    assert config.security_protocol("PLAINTEXT") == "PLAINTEXT"
    assert config.get("sasl.enabled.mechanisms") == ("GSSAPI",)
    assert config.get("authorizer.class.name") == "" and config.get("super.users") == ()
    assert config.get("connection.failed.authentication.delay.ms") == 100
    assert config.get("sasl.server.max.receive.size") == 524288


def test_named_listeners_map_case_insensitively_and_advertise_per_name() -> None:
    config = BrokerConfig({
        "listeners": "internal://0.0.0.0:9092,Client://127.0.0.1:9093",
        "listener.security.protocol.map": "INTERNAL:plaintext,client:sasl_plaintext",
        "advertised.listeners": "CLIENT://broker.example:19093",
        "sasl.enabled.mechanisms": "plain",
        "listener.name.client.plain.sasl.jaas.config": JAAS,
    })
    assert [l.name for l in config.listeners] == ["INTERNAL", "CLIENT"]
    assert config.security_protocol("client") == "SASL_PLAINTEXT"
    assert config.advertised_for("CLIENT") == Listener("CLIENT", "broker.example", 19093)
    assert config.advertised_for("INTERNAL") == Listener("INTERNAL", "localhost", 9092)
    assert config.sasl_mechanisms("CLIENT") == ("PLAIN",)
    assert config.jaas_config("CLIENT", "PLAIN") == JAAS


def test_listener_prefix_overrides_and_reauth_per_mechanism() -> None:
    config = BrokerConfig({
        "listeners": "A://127.0.0.1:1,B://127.0.0.1:2",
        "listener.security.protocol.map": "A:SASL_PLAINTEXT,B:SASL_PLAINTEXT",
        "sasl.enabled.mechanisms": "SCRAM-SHA-256",
        "listener.name.b.sasl.enabled.mechanisms": "SCRAM-SHA-512,GSSAPI",
        "connections.max.reauth.ms": "1000",
        "listener.name.b.connections.max.reauth.ms": "2000",
        "listener.name.b.scram-sha-512.connections.max.reauth.ms": "3000",
    })
    assert config.sasl_mechanisms("A") == ("SCRAM-SHA-256",)
    assert config.sasl_mechanisms("B") == ("SCRAM-SHA-512",)  # GSSAPI is not served
    assert config.reauth_ms("A", "SCRAM-SHA-256") == 1000
    assert config.reauth_ms("B", "SCRAM-SHA-256") == 2000
    assert config.reauth_ms("B", "SCRAM-SHA-512") == 3000


def test_unprefixed_client_auth_does_not_apply_to_sasl_ssl() -> None:
    config = BrokerConfig.__new__(BrokerConfig)  # just the lookup rule, without TLS files
    config._overrides = {}
    config._values = {"listener.security.protocol.map": {"S": "SASL_SSL", "T": "SSL"}, "ssl.client.auth": "required"}
    assert config.listener_value("S", "ssl.client.auth") == "none"
    assert config.listener_value("T", "ssl.client.auth") == "required"
    config._overrides = {("s", "ssl.client.auth"): "requested"}
    assert config.listener_value("S", "ssl.client.auth") == "requested"


@pytest.mark.parametrize("values,key", [
    ({"listeners": "FOO://127.0.0.1:1"}, "listeners"),
    ({"listeners": "A://127.0.0.1:1,a://127.0.0.1:2"}, "listeners"),
    ({"listeners": "A://127.0.0.1:1,B://127.0.0.1:1"}, "listeners"),
    ({"listener.security.protocol.map": "PLAINTEXT:TLS"}, "listener.security.protocol.map"),
    ({"advertised.listeners": "OTHER://h:1"}, "advertised.listeners"),
    ({"listeners": "SASL_PLAINTEXT://127.0.0.1:1"}, "sasl.enabled.mechanisms"),
    ({"listeners": "SASL_PLAINTEXT://127.0.0.1:1", "sasl.enabled.mechanisms": "PLAIN"},
     "listener.name.sasl_plaintext.plain.sasl.jaas.config"),
    ({"listeners": "SSL://127.0.0.1:1"}, "ssl.keystore.location"),
    ({"ssl.client.auth": "maybe"}, "ssl.client.auth"),
    ({"ssl.keystore.type": "BKS"}, "ssl.keystore.type"),
    ({"ssl.enabled.protocols": "TLSv1"}, "ssl.enabled.protocols"),
    ({"listener.name.plaintext.ssl.client.auth": "x"}, "listener.name.plaintext.ssl.client.auth"),
    ({"listener.name.plaintext.scram-sha-256.connections.max.reauth.ms": "-1"},
     "listener.name.plaintext.scram-sha-256.connections.max.reauth.ms"),
    ({"super.users": "admin"}, "super.users"),
    ({"authorizer.class.name": "com.example.Mine"}, "authorizer.class.name"),
    ({"allow.everyone.if.no.acl.found": "yes"}, "allow.everyone.if.no.acl.found"),
    ({"connections.max.reauth.ms": "-5"}, "connections.max.reauth.ms"),
])
def test_bad_values_name_the_key_in_one_line(values, key) -> None:
    with pytest.raises(ConfigError) as info:
        BrokerConfig(values)
    assert key in str(info.value) and "\n" not in str(info.value)


def test_inter_broker_keys_are_accepted_and_ignored() -> None:
    config = BrokerConfig({"inter.broker.listener.name": "INTERNAL", "security.inter.broker.protocol": "SSL",
                           "controller.listener.names": "CONTROLLER", "sasl.mechanism.inter.broker.protocol": "PLAIN",
                           "super.users": "User:admin;User:CN=a,O=b"})
    assert config.unknown == []
    assert config.get("super.users") == ("User:admin", "User:CN=a,O=b")


_PLAIN_JAAS = 'org.apache.kafka.common.security.plain.PlainLoginModule required username="p" password="pw";'
_SCRAM_JAAS = 'org.apache.kafka.common.security.scram.ScramLoginModule required username="s" password="sw";'


@pytest.mark.parametrize("mechanisms, jaas, inter_broker, login", [
    # Kafka's default (GSSAPI) is not served: PLAIN first, else a SCRAM mechanism with a login
    ("PLAIN,SCRAM-SHA-512", {"plain": _PLAIN_JAAS, "scram-sha-512": _SCRAM_JAAS}, None, ("PLAIN", "p", "pw")),
    ("SCRAM-SHA-256,SCRAM-SHA-512", {"scram-sha-512": _SCRAM_JAAS}, None, ("SCRAM-SHA-512", "s", "sw")),
    # named: that mechanism's JAAS login, and no other
    ("PLAIN,SCRAM-SHA-512", {"plain": _PLAIN_JAAS, "scram-sha-512": _SCRAM_JAAS}, "SCRAM-SHA-512",
     ("SCRAM-SHA-512", "s", "sw")),
    ("PLAIN,SCRAM-SHA-256", {"plain": _PLAIN_JAAS}, "SCRAM-SHA-256", None),   # no SCRAM login configured
    ("PLAIN", {"plain": _PLAIN_JAAS}, "SCRAM-SHA-512", None),                 # not enabled on the listener
])
def test_brokers_log_in_to_each_other_as_the_inter_broker_mechanism_says(mechanisms, jaas, inter_broker,
                                                                         login) -> None:
    from offsetd.server.listeners import peer_security

    values = {"listeners": "SASL_PLAINTEXT://127.0.0.1:0", "sasl.enabled.mechanisms": mechanisms,
              **{f"listener.name.sasl_plaintext.{m}.sasl.jaas.config": text for m, text in jaas.items()}}
    if inter_broker:
        values["sasl.mechanism.inter.broker.protocol"] = inter_broker
    assert peer_security(BrokerConfig(values), "SASL_PLAINTEXT").login == login
