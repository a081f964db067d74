"""Broker configuration: a `server.properties` file and `--override`s loaded through config_keys.py's
table, the keys checked against each other (listeners, SASL, TLS), and typed lookups by Kafka key,
per listener where a `listener.name.<name>.` prefix overrides a key (KIP-103).

`server.properties` uses Java properties syntax; every key a user sets is validated up front so a
bad value stops start-up with one line naming the key, as `kafka-server-start.sh` does.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any, Mapping

from .config_keys import LISTENER_KEYS, MECHANISM_KEYS, OPTIONAL_KEYS, SASL_MECHANISMS, SCHEMA, SENSITIVE_KEYS, Listener
from .config_tls import TlsConfigError, check_listener

log = logging.getLogger("offsetd.config")


class ConfigError(ValueError):
    """A configuration value that cannot be used; the message names the key."""


_LISTENER_PREFIX = re.compile(r"^listener\.name\.([a-z0-9_]+)\.(.+)$")
# Per-mechanism keys under a listener prefix: `<mech>.sasl.jaas.config`, `<mech>.connections.max.reauth.ms`.
_MECHANISM_KEY = re.compile(r"^([a-z0-9-]+)\.(sasl\.jaas\.config|connections\.max\.reauth\.ms)$")


def parse_properties(text: str) -> dict[str, str]:
    """Java `.properties` (server.properties, client --command-config files): `key=value`,
    `key:value` or `key value`; `#`/`!` comments; a trailing backslash continues the line (also
    on the last line); `\\` escapes in keys; values are stripped."""
    props: dict[str, str] = {}
    pending = ""
    for raw in text.splitlines():
        line = pending + raw.lstrip()
        pending = ""
        if not line or line[0] in "#!":
            continue
        if line.endswith("\\") and not line.endswith("\\\\"):
            pending = line[:-1]
            continue
        match = re.match(r"((?:[^=:\s\\]|\\.)+)\s*[=:\s]\s*(.*)", line)
        key, value = (match.group(1), match.group(2)) if match else (line, "")
        props[key.replace("\\", "")] = value.strip()
    if pending:
        key, _, value = pending.partition("=")
        props[key.strip()] = value.strip()
    return props


class BrokerConfig:
    """Typed, validated broker configuration; attribute access by Kafka key via `get`."""

    def __init__(self, values: Mapping[str, str] | None = None) -> None:
        raw = {key: default for key, (_, default, _) in SCHEMA.items()}
        self.unknown: list[str] = []
        prefixed: dict[str, str] = {}
        for key, value in (values or {}).items():
            if key not in SCHEMA:
                if _LISTENER_PREFIX.match(key):
                    prefixed[key] = value
                    continue
                self.unknown.append(key)
                log.warning("unknown config key %s (ignored)", key)
                continue
            raw[key] = value
        self._values: dict[str, Any] = {}
        for key, text in raw.items():
            parser = SCHEMA[key][0]
            if key in OPTIONAL_KEYS and text.strip() == "":
                self._values[key] = None
                continue
            try:
                self._values[key] = parser(text)
            except ValueError as exc:
                raise ConfigError(f"Invalid value {text!r} for configuration {key}: {exc}") from None
        if self._values["broker.heartbeat.interval.ms"] >= self._values["broker.session.timeout.ms"]:
            raise ConfigError("broker.heartbeat.interval.ms must be less than broker.session.timeout.ms "
                              f"({self._values['broker.heartbeat.interval.ms']} >= "
                              f"{self._values['broker.session.timeout.ms']})")
        self._check_consumer_group_bounds()
        self._check_share_group_bounds()
        self._raw = raw
        self._overrides: dict[tuple[str, str], Any] = {}
        for key, text in prefixed.items():
            self._parse_listener_key(key, text)
        self._check_listeners()
        self._check_tls()

    def _check_consumer_group_bounds(self) -> None:
        """The consumer protocol's session timeout and heartbeat interval within their min and
        max, and the interval below the timeout (Kafka's GroupCoordinatorConfig checks)."""
        v = self._values
        for what in ("session.timeout", "heartbeat.interval"):
            key, lo, hi = (f"group.consumer.{what}.ms", f"group.consumer.min.{what}.ms",
                           f"group.consumer.max.{what}.ms")
            if v[lo] > v[hi]:
                raise ConfigError(f"{lo} must be at most {hi} ({v[lo]} > {v[hi]})")
            if not v[lo] <= v[key] <= v[hi]:
                raise ConfigError(f"Invalid value {v[key]} for configuration {key}: must be between "
                                  f"{lo} ({v[lo]}) and {hi} ({v[hi]})")
        if v["group.consumer.heartbeat.interval.ms"] >= v["group.consumer.session.timeout.ms"]:
            raise ConfigError("group.consumer.heartbeat.interval.ms must be less than "
                              "group.consumer.session.timeout.ms")

    def _check_share_group_bounds(self) -> None:
        """Share groups' lock duration, session timeout and heartbeat interval within their min and
        max, the interval below the timeout, and room for a session per member (Kafka's checks)."""
        v = self._values
        for key, lo, hi in (("group.share.record.lock.duration.ms", "group.share.min.record.lock.duration.ms",
                             "group.share.max.record.lock.duration.ms"),
                            ("group.share.session.timeout.ms", "group.share.min.session.timeout.ms",
                             "group.share.max.session.timeout.ms"),
                            ("group.share.heartbeat.interval.ms", "group.share.min.heartbeat.interval.ms",
                             "group.share.max.heartbeat.interval.ms")):
            if v[lo] > v[hi]:
                raise ConfigError(f"{lo} must be at most {hi} ({v[lo]} > {v[hi]})")
            if not v[lo] <= v[key] <= v[hi]:
                raise ConfigError(f"Invalid value {v[key]} for configuration {key}: must be between "
                                  f"{lo} ({v[lo]}) and {hi} ({v[hi]})")
        if v["group.share.heartbeat.interval.ms"] >= v["group.share.session.timeout.ms"]:
            raise ConfigError("group.share.heartbeat.interval.ms must be less than group.share.session.timeout.ms")
        if v["group.share.max.share.sessions"] < v["group.share.max.size"]:
            raise ConfigError("group.share.max.share.sessions must be at least group.share.max.size "
                              f"({v['group.share.max.share.sessions']} < {v['group.share.max.size']})")

    def _parse_listener_key(self, key: str, text: str) -> None:
        """A `listener.name.<name>.<key>` override: the key's own parser, or a per-mechanism key."""
        match = _LISTENER_PREFIX.match(key)
        assert match is not None
        name, rest = match.group(1), match.group(2)
        mechanism = _MECHANISM_KEY.match(rest)
        if rest in LISTENER_KEYS:
            parser = SCHEMA[rest][0]
        elif mechanism:
            parser = MECHANISM_KEYS[mechanism.group(2)]
        else:
            self.unknown.append(key)
            log.warning("unknown config key %s (ignored)", key)
            return
        if name.upper() not in {l.name for l in self.listeners}:
            log.warning("config key %s names no listener of listeners (ignored)", key)
        try:
            self._overrides[(name, rest)] = parser(text)
        except ValueError as exc:
            raise ConfigError(f"Invalid value {text!r} for configuration {key}: {exc}") from None

    def _check_listeners(self) -> None:
        """Every listener has a security protocol; advertised names are listeners; every SASL
        listener has a usable mechanism (and PLAIN its JAAS users)."""
        protocols = self._values["listener.security.protocol.map"]
        for listener in self.listeners:
            if listener.name not in protocols:
                raise ConfigError(f"Invalid value {self._raw['listeners']!r} for configuration listeners: "
                                  f"listener {listener.name} has no security protocol in "
                                  "listener.security.protocol.map")
        names = {l.name for l in self.listeners}
        for advertised in self._values["advertised.listeners"] or ():
            if advertised.name not in names:
                raise ConfigError(f"Invalid value {self._raw['advertised.listeners']!r} for configuration "
                                  f"advertised.listeners: {advertised.name} is not a name in listeners")
        for listener in self.listeners:
            protocol = self.security_protocol(listener.name)
            if not protocol.startswith("SASL_"):
                continue
            key = self.listener_key(listener.name, "sasl.enabled.mechanisms")
            enabled = self.listener_value(listener.name, "sasl.enabled.mechanisms")
            usable = self.sasl_mechanisms(listener.name)
            for mechanism in enabled:
                if mechanism not in SASL_MECHANISMS:
                    log.warning("%s: SASL mechanism %s is not served by offsetd (ignored)", key, mechanism)
            if not usable:
                raise ConfigError(f"Invalid value {','.join(enabled)!r} for configuration {key}: listener "
                                  f"{listener.name} ({protocol}) needs one of {', '.join(SASL_MECHANISMS)}")
            jaas_key = f"listener.name.{listener.name.lower()}.plain.sasl.jaas.config"
            jaas = self.jaas_config(listener.name, "PLAIN")
            if "PLAIN" in usable and not jaas:
                raise ConfigError(f"Missing value for configuration {jaas_key}: PLAIN on listener "
                                  f"{listener.name} needs its users (user_<name>=\"password\")")
            if "PLAIN" in usable:
                from .security.sasl import mechanism_factories  # sans-IO: parses the JAAS text

                try:
                    mechanism_factories(("PLAIN",), {"PLAIN": jaas}, lambda mechanism, user: None)
                except ValueError as exc:
                    raise ConfigError(f"Invalid value for configuration {jaas_key}: {exc}") from None
            if protocol == "SASL_SSL" and self._raw["ssl.client.auth"].strip().lower() != "none" and \
                    (listener.name.lower(), "ssl.client.auth") not in self._overrides:
                log.warning("ssl.client.auth is ignored on SASL_SSL listener %s: set "
                            "listener.name.%s.ssl.client.auth (KIP-684)", listener.name, listener.name.lower())

    def _check_tls(self) -> None:
        """Every SSL / SASL_SSL listener's keystore, truststore and mapping rules, checked without
        building its ssl context (server/tls.py builds them at start-up)."""
        for listener in self.listeners:
            protocol = self.security_protocol(listener.name)
            if protocol.endswith("SSL"):
                try:
                    check_listener(self, listener.name, protocol)
                except TlsConfigError as exc:
                    raise ConfigError(exc.line(listener.name)) from None

    # ------------------------------------------------------------------ listeners

    @property
    def listeners(self) -> tuple[Listener, ...]:
        """Every listener the broker binds, in the order of `listeners`."""
        return self._values["listeners"]

    def security_protocol(self, listener_name: str) -> str:
        """PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL of a listener name."""
        return self._values["listener.security.protocol.map"][listener_name.upper()]

    def listener_value(self, listener: "Listener | str", key: str) -> Any:
        """`listener.name.<name>.<key>` if set, else the broker-wide `key` (None for a per-mechanism
        key set nowhere). On SASL_SSL, ssl.client.auth counts only with the prefix (KIP-684)."""
        name = (listener.name if isinstance(listener, Listener) else listener).lower()
        if (name, key) in self._overrides:
            return self._overrides[(name, key)]
        if key == "ssl.client.auth" and self.security_protocol(name) == "SASL_SSL":
            return "none"
        if _MECHANISM_KEY.match(key):
            return None
        return self._values[key]

    def listener_key(self, listener: "Listener | str", key: str) -> str:
        """The key to name in an error about a listener's `key`: `listener.name.<name>.<key>` if
        set, else the broker-wide key."""
        name = (listener.name if isinstance(listener, Listener) else listener).lower()
        return f"listener.name.{name}.{key}" if (name, key) in self._overrides else key

    def sasl_mechanisms(self, listener: "Listener | str") -> tuple[str, ...]:
        """The enabled mechanisms of a listener that offsetd serves, in the configured order."""
        return tuple(m for m in self.listener_value(listener, "sasl.enabled.mechanisms") if m in SASL_MECHANISMS)

    def jaas_config(self, listener: "Listener | str", mechanism: str) -> str | None:
        """`listener.name.<l>.<mech>.sasl.jaas.config` (a broker-wide sasl.jaas.config is ignored)."""
        return self.listener_value(listener, f"{mechanism.lower()}.sasl.jaas.config")

    def reauth_ms(self, listener: "Listener | str", mechanism: str) -> int:
        """connections.max.reauth.ms for a listener and mechanism (most specific key first)."""
        value = self.listener_value(listener, f"{mechanism.lower()}.connections.max.reauth.ms")
        return int(self.listener_value(listener, "connections.max.reauth.ms") if value is None else value)

    def bound(self, listener_name: str, port: int) -> None:
        """Record the port a `:0` listener was given, so it is the advertised one."""
        self._values["listeners"] = tuple(
            Listener(l.name, l.host, port) if l.name == listener_name and l.port == 0 else l for l in self.listeners)

    def advertised_for(self, listener_name: str) -> Listener:
        """Where clients of a listener are told to connect: its `advertised.listeners` entry,
        else the bound address (a wildcard host becomes localhost)."""
        for advertised in self._values["advertised.listeners"] or ():
            if advertised.name == listener_name:
                return advertised
        for listener in self.listeners:
            if listener.name == listener_name:
                host = listener.host or "localhost"
                return Listener(listener.name, "localhost" if host == "0.0.0.0" else host, listener.port)
        raise KeyError(listener_name)

    def get(self, key: str) -> Any:
        """The typed value of a Kafka config key."""
        return self._values[key]

    def raw(self, key: str) -> str:
        """The value as a string, as DescribeConfigs reports it."""
        return self._raw[key]

    def items_raw(self) -> list[tuple[str, str | None]]:
        """All known keys with their string values; None for a secret (DescribeConfigs, as Kafka,
        never shows passwords or keys)."""
        return sorted((k, None if k in SENSITIVE_KEYS else v) for k, v in self._raw.items())

    @property
    def listener(self) -> Listener:
        return self._values["listeners"][0]

    @property
    def advertised_listener(self) -> Listener:
        """The first listener's advertised address (the default endpoint)."""
        return self.advertised_for(self.listener.name)

    @property
    def log_dir(self) -> Path:
        return Path(self._values["log.dirs"].split(",")[0]).expanduser()

    @classmethod
    def load(cls, path: str | Path | None, overrides: list[str]) -> "BrokerConfig":
        """Read a properties file (optional) and apply `key=value` overrides on top."""
        values: dict[str, str] = {}
        if path is not None:
            try:
                values.update(parse_properties(Path(path).read_text(encoding="utf-8")))
            except OSError as exc:
                raise ConfigError(f"Cannot read config file {path}: {exc.strerror}") from None
        for item in overrides:
            key, sep, value = item.partition("=")
            if not sep or not key.strip():
                raise ConfigError(f"Invalid --override {item!r}: expected key=value")
            values[key.strip()] = value
        return cls(values)
