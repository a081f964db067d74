"""Security core, sans-IO (reference security.md): ACLs and the authorize function, SASL mechanisms and
the per-connection SASL state machine, JAAS parsing, SCRAM credentials, DN -> principal mapping."""

from .acl import (
    CLUSTER_NAME,
    AclBinding,
    AclFilter,
    AclOperation,
    AclPermission,
    Authorizer,
    PatternType,
    ResourceType,
    normalize_host,
    parse_super_users,
)
from .credentials import (
    MAX_ITERATIONS,
    MIN_ITERATIONS,
    SCRAM_MECHANISM_CODES,
    SCRAM_MECHANISM_IDS,
    ScramCredential,
    credential_from_password,
    credential_from_salted_password,
    iterations_problem,
    salted_password,
)
from .jaas import parse_jaas_config
from .mechanism import AuthenticationFailed, Mechanism, MechanismFactory
from .plain import PlainServer, plain_users
from .principal import PrincipalMapper, parse_rules, principal_from_dn
from .sasl import Action, Admission, HandshakeResult, SaslServer, SaslState, SaslStep, mechanism_factories
from .scram import ScramServer, sasl_name_to_user, user_to_sasl_name

__all__ = [
    "CLUSTER_NAME", "AclBinding", "AclFilter", "AclOperation", "AclPermission", "Authorizer", "PatternType",
    "ResourceType", "normalize_host", "parse_super_users",
    "MAX_ITERATIONS", "MIN_ITERATIONS", "SCRAM_MECHANISM_CODES", "SCRAM_MECHANISM_IDS", "ScramCredential",
    "credential_from_password", "credential_from_salted_password", "iterations_problem", "salted_password",
    "parse_jaas_config", "AuthenticationFailed", "Mechanism", "MechanismFactory", "PlainServer", "plain_users",
    "PrincipalMapper", "parse_rules", "principal_from_dn",
    "Action", "Admission", "HandshakeResult", "SaslServer", "SaslState", "SaslStep", "mechanism_factories",
    "ScramServer", "sasl_name_to_user", "user_to_sasl_name",
]
