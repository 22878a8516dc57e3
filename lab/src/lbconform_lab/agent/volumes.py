"""A pod's volumes, made as the kubelet makes them, in the node's own lab directory.

Each volume is a directory ``<node dir>/volumes/<pod uid>/<volume>``, bound into the
containers that mount it (``rootfs``). Content volumes (configMap, secret, downwardAPI,
projected, with projected service-account tokens) are written as the kubelet's atomic
writer does: the files live in a timestamped directory, ``..data`` points at it, and each
top-level name is a symlink through ``..data``; an update writes a new directory and swaps
``..data`` in one rename, so a reader sees the old files or the new ones, never a mix. The
agent calls ``sync`` every few seconds: an object that changed, a label that changed or a
token due for refresh rewrites the volume. emptyDir is a directory that lives as long as
the pod; hostPath may name only paths inside the node's own lab directory.

Anything else (csi, persistentVolumeClaim, nfs, ...) is a ``VolumeError`` that names the
supported kinds; the pod then waits in ContainerCreating with a FailedMount event, as the
kubelet leaves a pod whose volume cannot be set up.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lbconform_lab.agent import envsources
from lbconform_lab.agent.objects import CONFIG_MAP, SECRET, Missing, ObjectCache
from lbconform_lab.agent.rootfs import Mount
from lbconform_lab.agent.tokens import DEFAULT_SECONDS, TokenError, TokenManager

Json = Mapping[str, Any]

SUPPORTED = ("configMap", "downwardAPI", "emptyDir", "hostPath", "projected", "secret")
_CONTENT = ("configMap", "downwardAPI", "projected", "secret")
DEFAULT_MODE = 0o644
DATA = "..data"


class VolumeError(Exception):
    """A volume cannot be set up; the message is the FailedMount event's."""


#: A content volume's files: relative path -> (bytes, mode).
Payload = dict[str, tuple[bytes, int]]


def write_atomically(target: Path, payload: Payload) -> bool:
    """Make ``target`` hold exactly ``payload`` (the kubelet's AtomicWriter); False if it already did."""
    target.mkdir(parents=True, exist_ok=True)
    current = target / DATA
    if current.is_symlink() and _reads(current) == payload:
        return False
    stamp = target / f"..{time.strftime('%Y_%m_%d_%H_%M_%S')}.{time.monotonic_ns()}"
    stamp.mkdir()
    for rel, (data, mode) in payload.items():
        path = stamp / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        path.chmod(mode)
    old = os.readlink(current) if current.is_symlink() else None
    tmp = target / "..data_tmp"
    tmp.unlink(missing_ok=True)
    tmp.symlink_to(stamp.name)
    tmp.replace(current)
    tops = {rel.split("/", 1)[0] for rel in payload}
    for top in tops:
        link = target / top
        if not link.is_symlink():
            link.symlink_to(f"{DATA}/{top}")
    for entry in target.iterdir():
        if entry.is_symlink() and not entry.name.startswith("..") and entry.name not in tops:
            entry.unlink()
    if old:
        shutil.rmtree(target / old, ignore_errors=True)
    return True


def _reads(data_link: Path) -> Payload:
    root = data_link.resolve()
    out: Payload = {}
    for path in root.rglob("*"):
        if path.is_file():
            out[str(path.relative_to(root))] = (path.read_bytes(), path.stat().st_mode & 0o777)
    return out


@dataclass
class PodContext:
    """What a pod's volumes are made from."""

    pod: Json
    pod_ip: str
    host_ip: str
    objects: ObjectCache
    tokens: TokenManager
    node: envsources.NodeResources


def _kind(volume: Json) -> str:
    return next((k for k in volume if k != "name"), "")


def _keyed(ctx: PodContext, kind: str, name: str, items: list[Json] | None, optional: bool,
           default_mode: int) -> Payload:
    data = ctx.objects.get(kind, ctx.pod["metadata"]["namespace"], name, optional)
    if data is None:
        return {}
    if not items:
        return {k: (v, default_mode) for k, v in data.items.items()}
    out: Payload = {}
    for item in items:
        if item["key"] not in data.items:
            if optional:
                continue
            raise Missing(f"{kind.lower()} references non-existent config key: {item['key']}")
        out[item["path"]] = (data.items[item["key"]], int(item.get("mode", default_mode)))
    return out


def _downward(ctx: PodContext, items: list[Json], default_mode: int) -> Payload:
    out: Payload = {}
    for item in items:
        if "fieldRef" in item:
            value = envsources.field_ref(ctx.pod, item["fieldRef"]["fieldPath"], ctx.pod_ip, ctx.host_ip)
        else:
            ref = item["resourceFieldRef"]
            value = envsources.resource_field_ref(ctx.pod, ref.get("containerName", ""), ref, ctx.node)
        out[item["path"]] = (value.encode(), int(item.get("mode", default_mode)))
    return out


def _projected(ctx: PodContext, spec: Json) -> Payload:
    mode = int(spec.get("defaultMode", DEFAULT_MODE))
    meta = ctx.pod["metadata"]
    out: Payload = {}
    for source in spec.get("sources") or []:
        if "configMap" in source:
            s = source["configMap"]
            out.update(_keyed(ctx, CONFIG_MAP, s["name"], s.get("items"), bool(s.get("optional")), mode))
        elif "secret" in source:
            s = source["secret"]
            out.update(_keyed(ctx, SECRET, s["name"], s.get("items"), bool(s.get("optional")), mode))
        elif "downwardAPI" in source:
            out.update(_downward(ctx, source["downwardAPI"].get("items") or [], mode))
        elif "serviceAccountToken" in source:
            s = source["serviceAccountToken"]
            account = ctx.pod["spec"].get("serviceAccountName") or "default"
            token = ctx.tokens.token(meta["namespace"], account, meta["name"], meta["uid"],
                                     s.get("audience", ""), int(s.get("expirationSeconds", DEFAULT_SECONDS)))
            out[s["path"]] = (token.encode(), mode)
        else:
            raise VolumeError(f"projected source {sorted(source)} is not supported by the lab "
                              "(it projects configMap, downwardAPI, secret and serviceAccountToken)")
    return out


def payload(ctx: PodContext, volume: Json) -> Payload:
    """A content volume's files now."""
    kind = _kind(volume)
    spec = volume[kind]
    mode = int(spec.get("defaultMode", DEFAULT_MODE))
    if kind == "configMap":
        return _keyed(ctx, CONFIG_MAP, spec["name"], spec.get("items"), bool(spec.get("optional")), mode)
    if kind == "secret":
        return _keyed(ctx, SECRET, spec["secretName"], spec.get("items"), bool(spec.get("optional")), mode)
    if kind == "downwardAPI":
        return _downward(ctx, spec.get("items") or [], mode)
    return _projected(ctx, spec)


class PodVolumes:
    """One pod's volumes: ``setup`` before its containers start, ``sync`` while it runs."""

    def __init__(self, node_dir: Path, ctx: PodContext) -> None:
        self.node_dir = node_dir.resolve()
        self.ctx = ctx
        self.dir = self.node_dir / "volumes" / str(ctx.pod["metadata"]["uid"])
        self.paths: dict[str, Path] = {}

    def setup(self) -> None:
        """Make every volume; raises VolumeError (with the volume's name) on the first that fails."""
        for volume in self.ctx.pod["spec"].get("volumes") or []:
            self.paths[volume["name"]] = self._make(volume)

    def sync(self, pod: Json) -> None:
        """Bring content volumes up to date with ``pod`` and the objects it names."""
        self.ctx.pod = pod
        for volume in pod["spec"].get("volumes") or []:
            if _kind(volume) in _CONTENT and volume["name"] in self.paths:
                self._write(volume)

    def remove(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)
        self.ctx.tokens.forget(self.ctx.pod["metadata"]["uid"])

    def _fail(self, volume: Json, why: str) -> VolumeError:
        return VolumeError(f'MountVolume.SetUp failed for volume "{volume["name"]}" : {why}')

    def _write(self, volume: Json) -> None:
        try:
            write_atomically(self.dir / volume["name"], payload(self.ctx, volume))
        except (Missing, TokenError, envsources.ConfigError) as exc:
            raise self._fail(volume, str(exc)) from exc

    def _make(self, volume: Json) -> Path:
        kind = _kind(volume)
        path = self.dir / str(volume["name"])
        if kind in _CONTENT:
            self._write(volume)
            return path
        if kind == "emptyDir":
            path.mkdir(parents=True, exist_ok=True)
            path.chmod(0o777)
            return path
        if kind == "hostPath":
            return self._host_path(volume)
        raise self._fail(volume, f"the lab does not support {kind or 'empty'} volumes; "
                                 f"it supports {', '.join(SUPPORTED)}")

    def _host_path(self, volume: Json) -> Path:
        spec = volume["hostPath"]
        path = Path(os.path.realpath(spec["path"]))
        if path != self.node_dir and self.node_dir not in path.parents:
            raise self._fail(volume, f"hostPath {spec['path']} is outside the node's lab directory "
                                     f"{self.node_dir}: the lab allows hostPath only there")
        kind = spec.get("type") or ""
        if kind == "DirectoryOrCreate":
            path.mkdir(parents=True, exist_ok=True)
        elif kind == "FileOrCreate":
            path.parent.mkdir(parents=True, exist_ok=True)
            path.touch(exist_ok=True)
        elif kind in ("Directory", "File") and not (path.is_dir() if kind == "Directory" else path.is_file()):
            raise self._fail(volume, f"hostPath type check failed: {spec['path']} is not a {kind.lower()}")
        elif not path.exists():
            raise self._fail(volume, f"hostPath {spec['path']} does not exist")
        return path

    def mounts(self, container: Json) -> list[Mount]:
        """The container's volumeMounts as binds; content volumes are always read-only."""
        kinds = {v["name"]: _kind(v) for v in self.ctx.pod["spec"].get("volumes") or []}
        out = []
        for vm in container.get("volumeMounts") or []:
            source = self.paths[vm["name"]]
            if vm.get("subPath"):
                root, source = source, Path(os.path.realpath(source / vm["subPath"]))
                if source != root and root not in source.parents:
                    raise VolumeError(f"subPath {vm['subPath']} of volume {vm['name']} leaves the volume")
            read_only = bool(vm.get("readOnly")) or kinds[vm["name"]] in _CONTENT
            out.append(Mount(source, vm["mountPath"], read_only))
        return out
