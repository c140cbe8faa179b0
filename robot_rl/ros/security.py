"""Who may talk to the graph: SROS2 keystores whose permissions let each node publish and subscribe
only what the graph gives it. (The per-run secret that signs actor<->learner payloads is
robot_rl/transport/secret.py.)

`write_keystore` lays out what SROS2 (`ros2 security create_keystore` / `create_enclave`) lays
out: a CA under `public/` and `private/`, and one enclave per node under `enclaves/` holding its
certificate and key, the CA certificates and the governance and permissions documents, each
signed as S/MIME by the permissions CA. Enforcement is the RMW's job (DDS Security); the Fast DDS
wheels on PyPI are built without it, so the enclaves only take effect on a ROS 2 install from apt.
"""

from __future__ import annotations

import datetime
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable
from xml.sax.saxutils import escape

from robot_rl.outputs import UserError, atomic_path
from robot_rl.robots.registry import CAMERA_TOPICS, RESET, TELEOP_TOPICS, Endpoints
from robot_rl.ros.graph import NodeSpec
from robot_rl.ros.node_kinds import DEPRECATED_NODE_NAMES

# ---- what each node may publish and subscribe -----------------------------------------------------


ARM_STATE = ("joint_states", "arm/ee_pose", "cube/pose")

EVERY_NODE = Endpoints(
    publish=("/rosout", "/parameter_events", "/diagnostics"),
    subscribe=("/parameter_events", "/clock"),
    serves=tuple(f"~/{name}" for name in ("describe_parameters", "get_parameter_types", "get_parameters",
                                          "get_type_description", "list_parameters", "set_parameters",
                                          "set_parameters_atomically")),
)
"""What rclpy gives every node: logging, parameter events and services, simulated time."""

# The generic nodes', derived from their modules (robot_rl/nodes/) and the topic table of DESIGN.md; a robot's
# own nodes give theirs in their NodeKind (robot_rl/robots/<robot>/__init__.py). Hardware nodes also talk to
# their device's driver topics, named in hardware/<device>.yaml: add those to the generated permissions for a
# real robot.
NODE_ENDPOINTS: dict[str, Endpoints] = {
    "env_sim": Endpoints(publish=("env/state", "env/outcome", CAMERA_TOPICS[0], "/clock"),
                         subscribe=("env/cmd", "/estop", "session/status"),
                         serves=("~/reset", "~/reset_estop")),
    "env_actor": Endpoints(publish=("env/cmd", "episode/event", "episode/step", "rl/transitions",
                                   "session/status"),
                           subscribe=("env/state", "env/outcome", CAMERA_TOPICS[0], *TELEOP_TOPICS, "reward",
                                      "reward/done", "rl/policy", "rl/acks"),
                           calls=(RESET,)),
    "learner": Endpoints(publish=("rl/acks", "rl/policy"), subscribe=("rl/transitions", "reward", "reward/done")),
    "camera": Endpoints(publish=CAMERA_TOPICS),
    "teleop": Endpoints(publish=TELEOP_TOPICS, subscribe=("/estop", "joy")),
    "scripted_human": Endpoints(publish=("joy",), subscribe=(*ARM_STATE, "arm/cmd", "arm/gripper")),
    "session_view": Endpoints(subscribe=(CAMERA_TOPICS[0], "session/status", "arm/cmd", "arm/gripper", "teleop/cmd",
                                         "teleop/gripper", "joint_states", "reward")),  # the last six: its Rerun log
    "reward": Endpoints(publish=("reward", "reward/done"),
                        subscribe=("task/goal", "teleop/event", "episode/event", CAMERA_TOPICS[0])),
}


def resolve(name: str, namespace: str, node: str) -> str:
    """A ROS name made absolute the way rcl does it (`~` is the node's own name)."""
    prefix = f"/{namespace.strip('/')}" if namespace.strip("/") else ""
    if name.startswith("~/"):
        return f"{prefix}/{node}/{name[2:]}"
    return name if name.startswith("/") else f"{prefix}/{name}"


@dataclass(frozen=True)
class DdsTopics:
    """A node's DDS topic names as Fast DDS spells them in permissions: `rt/` topics, services as
    `rq/<name>Request` and `rr/<name>Reply` pairs."""

    publish: tuple[str, ...]
    subscribe: tuple[str, ...]


def node_dds_topics(spec: NodeSpec, cameras: Iterable[str]) -> DdsTopics:
    """What `spec`'s node may publish and subscribe on DDS."""
    own, common = NODE_ENDPOINTS.get(spec.name) or spec.kind.endpoints, EVERY_NODE
    if own is None:
        raise UserError(f"node {spec.name} declares no topics or services for its SROS2 permissions: give its "
                        "NodeKind endpoints=Endpoints(...)")

    def names(declared: Iterable[str]) -> list[str]:
        out = []
        for name in declared:
            if RESET in name:
                if spec.parameters.get("reset_service"):
                    out.append(spec.parameters["reset_service"])
            elif "{camera}" in name:
                out += [name.format(camera=camera) for camera in cameras]
            else:
                out.append(name)
        return [resolve(spec.remaps.get(n, n), spec.namespace, spec.name) for n in out]

    serves = names(own.serves + common.serves)
    calls = names(own.calls + common.calls)
    publish = ([f"rt{n}" for n in names(own.publish + common.publish)]
               + [f"rr{n}Reply" for n in serves] + [f"rq{n}Request" for n in calls])
    subscribe = ([f"rt{n}" for n in names(own.subscribe + common.subscribe)]
                 + [f"rq{n}Request" for n in serves] + [f"rr{n}Reply" for n in calls])
    return DdsTopics(tuple(sorted(set(publish))), tuple(sorted(set(subscribe))))


def enclave_name(spec: NodeSpec) -> str:
    return resolve(spec.name, spec.namespace, spec.name)


# ---- DDS Security documents ----------------------------------------------------------------------

DOMAINS = "<id_range><min>0</min><max>232</max></id_range>"
"""Every ROS_DOMAIN_ID (the graph picks its own)."""

GOVERNANCE = f"""<?xml version="1.0" encoding="UTF-8"?>
<dds xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance"
     xsi:noNamespaceSchemaLocation="http://www.omg.org/spec/DDS-SECURITY/20170901/omg_shared_ca_governance.xsd">
  <domain_access_rules>
    <domain_rule>
      <domains>{DOMAINS}</domains>
      <allow_unauthenticated_participants>false</allow_unauthenticated_participants>
      <enable_join_access_control>true</enable_join_access_control>
      <discovery_protection_kind>ENCRYPT</discovery_protection_kind>
      <liveliness_protection_kind>ENCRYPT</liveliness_protection_kind>
      <rtps_protection_kind>SIGN</rtps_protection_kind>
      <topic_access_rules>
        <topic_rule>
          <topic_expression>*</topic_expression>
          <enable_discovery_protection>true</enable_discovery_protection>
          <enable_liveliness_protection>true</enable_liveliness_protection>
          <enable_read_access_control>true</enable_read_access_control>
          <enable_write_access_control>true</enable_write_access_control>
          <metadata_protection_kind>ENCRYPT</metadata_protection_kind>
          <data_protection_kind>ENCRYPT</data_protection_kind>
        </topic_rule>
      </topic_access_rules>
    </domain_rule>
  </domain_access_rules>
</dds>
"""


def permissions_xml(enclave: str, topics: DdsTopics, not_before: datetime.datetime,
                    not_after: datetime.datetime) -> str:
    def block(tag: str, names: tuple[str, ...]) -> str:
        items = "".join(f"\n            <topic>{escape(n)}</topic>" for n in names)
        return f"\n        <{tag}>\n          <topics>{items}\n          </topics>\n        </{tag}>" if names else ""

    stamp = "%Y-%m-%dT%H:%M:%S"
    return f"""<?xml version="1.0" encoding="UTF-8"?>
<dds xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance"
     xsi:noNamespaceSchemaLocation="http://www.omg.org/spec/DDS-SECURITY/20170901/omg_shared_ca_permissions.xsd">
  <permissions>
    <grant name="{escape(enclave)}">
      <subject_name>CN={escape(enclave)}</subject_name>
      <validity>
        <not_before>{not_before.strftime(stamp)}</not_before>
        <not_after>{not_after.strftime(stamp)}</not_after>
      </validity>
      <allow_rule>
        <domains>{DOMAINS}</domains>{block("publish", topics.publish)}{block("subscribe", topics.subscribe)}
      </allow_rule>
      <default>DENY</default>
    </grant>
  </permissions>
</dds>
"""


# ---- the keystore ---------------------------------------------------------------------------------

VALID_DAYS = 3650


class _Authority:
    """The keystore's CA (identity and permissions CA at once, as SROS2 makes it)."""

    def __init__(self, now: datetime.datetime):
        from cryptography.hazmat.primitives.asymmetric import ec

        self.now = now
        self.key = ec.generate_private_key(ec.SECP256R1())
        self.cert = self.issue("robot_rl keystore CA", self.key.public_key(), ca=True)

    def issue(self, common_name: str, public_key, ca: bool = False):
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes
        from cryptography.x509.oid import NameOID

        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
        issuer = subject if ca else self.cert.subject
        return (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer).public_key(public_key)
                .serial_number(x509.random_serial_number()).not_valid_before(self.now)
                .not_valid_after(self.now + datetime.timedelta(days=VALID_DAYS))
                .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
                .sign(self.key, hashes.SHA256()))

    def sign_smime(self, document: str) -> bytes:
        """Detached S/MIME signature with the document inside (what DDS Security reads)."""
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.serialization import pkcs7

        return (pkcs7.PKCS7SignatureBuilder().set_data(document.encode()).add_signer(self.cert, self.key, hashes.SHA256())
                .sign(serialization.Encoding.SMIME, [pkcs7.PKCS7Options.DetachedSignature, pkcs7.PKCS7Options.Text]))


def _pem_cert(cert) -> bytes:
    from cryptography.hazmat.primitives import serialization

    return cert.public_bytes(serialization.Encoding.PEM)


def _pem_key(key) -> bytes:
    from cryptography.hazmat.primitives import serialization

    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _write(path: Path, data: bytes, private: bool = False) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    if private:
        path.chmod(0o600)


def write_keystore(keystore: str | os.PathLike, specs: list[NodeSpec], cameras: Iterable[str]) -> list[str]:
    """Writes a complete keystore for the graph `specs` (built whole, then renamed into place);
    returns the enclave names."""
    try:
        from cryptography.hazmat.primitives.asymmetric import ec
    except ImportError:
        raise UserError("robot-rl security needs the 'cryptography' package: pip install cryptography") from None
    cameras = tuple(cameras)
    now = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0)
    authority = _Authority(now)
    governance = GOVERNANCE.encode()
    governance_p7s = authority.sign_smime(GOVERNANCE)
    ca_pem = _pem_cert(authority.cert)
    enclaves = []
    with atomic_path(keystore, directory=True) as root:
        _write(root / "public" / "ca.cert.pem", ca_pem)
        for role in ("identity_ca", "permissions_ca"):
            _write(root / "public" / f"{role}.cert.pem", ca_pem)
        _write(root / "private" / "ca.key.pem", _pem_key(authority.key), private=True)
        _write(root / "enclaves" / "governance.xml", governance)
        _write(root / "enclaves" / "governance.p7s", governance_p7s)
        for spec in specs:
            name = enclave_name(spec)
            directory = root / "enclaves" / name.strip("/")
            key = ec.generate_private_key(ec.SECP256R1())
            permissions = permissions_xml(name, node_dds_topics(spec, cameras), now,
                                          now + datetime.timedelta(days=VALID_DAYS))
            _write(directory / "key.pem", _pem_key(key), private=True)
            _write(directory / "cert.pem", _pem_cert(authority.issue(name, key.public_key())))
            for role in ("identity_ca", "permissions_ca"):
                _write(directory / f"{role}.cert.pem", ca_pem)
            _write(directory / "governance.p7s", governance_p7s)
            _write(directory / "permissions.xml", permissions.encode())
            _write(directory / "permissions.p7s", authority.sign_smime(permissions))
            enclaves.append(name)
    return enclaves


ENFORCEMENT_NOTE = """\
Note: the Fast DDS wheels from PyPI (what `make` installs) are built without DDS Security, so these
enclaves are not enforced in this environment; transition payloads are still authenticated with the
run's secret. On a ROS 2 install from apt, before starting the graph:
  export ROS_SECURITY_KEYSTORE={keystore}
  export ROS_SECURITY_ENABLE=true
  export ROS_SECURITY_STRATEGY=Enforce
and start each node with its enclave, e.g. `ros2 run robot_rl learner --ros-args --enclave /learner`."""


def check_keystore(keystore: str | os.PathLike) -> None:
    """Refuses (UserError, one line) a keystore made before `sim` and `actor` became `arm_sim` and
    `arm_actor`: its enclaves and their permissions (`/sim/reset`, ...) are named after the old nodes,
    so the renamed nodes could not use them."""
    enclaves = Path(keystore) / "enclaves"
    if not enclaves.is_dir():
        return
    for old, new in DEPRECATED_NODE_NAMES.items():
        for found in sorted(enclaves.rglob(old)):
            if (found / "permissions.xml").is_file():
                raise UserError(f"keystore {keystore} was made for the node {old!r} (enclave "
                                f"/{found.relative_to(enclaves).as_posix()}), now named {new!r}: re-run "
                                "`robot-rl security init --overwrite` for this task")


def init_keystore(task: str, keystore: str | os.PathLike, *, overwrite: bool = False, backend: str = "sim",
                  namespace: str = "") -> list[str]:
    """`robot-rl security init`: the keystore for `task`'s graph (refuses an existing one unless
    `overwrite`); returns the enclave names."""
    from robot_rl.outputs import check_output
    from robot_rl.ros.graph import build_graph, config_path, load_config
    from robot_rl.tasks import get_task

    config = load_config(config_path(task))
    specs = build_graph(config, backend, namespace=namespace)
    check_output(keystore, "keystore", overwrite=overwrite)
    return write_keystore(keystore, specs, get_task(config["robot_rl"]["task"]).cameras)
