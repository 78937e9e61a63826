"""template.yaml as CloudFormation receives it: the SAM transform applied offline by ``samtranslator``.

    document = transformed(Path("template.yaml"), {"ModelSource": "https://...", "ModelSha256": "..."})
    stack = Stack.of(document, parameters)          # resources that exist under these parameters
    stack.depends_on("InferenceFunctionVersion...")  # every logical ID it waits for, directly or not

Code folders become placeholder S3 URIs named after their content's digest; docs/redeploys.md says why.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
from samtranslator.model.exceptions import InvalidDocumentException
from samtranslator.parser.parser import Parser
from samtranslator.translator.translator import Translator
from samtranslator.yaml_helper import yaml_parse

from snapllm.errors import ConfigurationError
from snapllm_dev import sam

PLACEHOLDER_REGION = "us-east-1"
_CODE_PROPERTIES = ("CodeUri", "ContentUri")


class TransformError(ConfigurationError):
    """SAM's translator refused the template; the message lists its reasons."""


def folder_digest(folder: Path, edits: Mapping[str, bytes] | None = None) -> str:
    """SHA-256 over a folder's files (relative path and content; symlinks followed, as SAM copies them), with
    ``edits`` ({relative path: content}) standing in for those files: the folder as it would be after them."""
    digest = hashlib.sha256()
    edits = dict(edits or {})
    files: dict[str, Path] = {}
    for root, dirs, names in os.walk(folder, followlinks=True):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        for name in names:
            path = Path(root, name)
            files[path.relative_to(folder).as_posix()] = path
    for name in sorted(set(files) | set(edits)):
        content = edits[name] if name in edits else files[name].read_bytes()
        digest.update(name.encode() + b"\0" + hashlib.sha256(content).digest())
    return digest.hexdigest()


def transformed(
    template: Path,
    parameters: Mapping[str, str] | None = None,
    *,
    code_digests: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The CloudFormation document ``sam deploy`` would submit for ``template`` with ``parameters``.

    ``code_digests``: {code folder as the template names it: content digest} to use instead of the
    folders' own (:func:`folder_digest`), as after a change of their code.
    """
    document = copy.deepcopy(_parsed(template.read_text()))
    code_digests = dict(code_digests or {})
    for resource in (document.get("Resources") or {}).values():
        properties = resource.get("Properties") or {}
        for name in _CODE_PROPERTIES:
            value = properties.get(name)
            if isinstance(value, str) and not value.startswith("s3://"):
                key = code_digests.get(value) or folder_digest(template.parent / value)
                properties[name] = f"s3://deploy-check-placeholder/{value.strip('/')}/{key}"
    return _translate(document, parameters, PLACEHOLDER_REGION, source=str(template))


@functools.lru_cache(maxsize=4)
def _parsed(text: str) -> dict[str, Any]:
    """A template's text parsed once: the redeploy check transforms the same text once per change, and
    parsing (pure-Python YAML) costs more than the translation. Callers change only a deep copy."""
    return yaml_parse(text)


def translate_document(
    text: str, parameters: Mapping[str, str] | None = None, region: str = PLACEHOLDER_REGION
) -> dict[str, Any]:
    """A SAM template as ``sam deploy`` submits it (code already in S3), translated as CloudFormation's SAM
    transform would with ``parameters``, in ``region``."""
    return _translate(yaml_parse(text), parameters, region, source="the template")


def _translate(
    document: dict[str, Any], parameters: Mapping[str, str] | None, region: str, *, source: str
) -> dict[str, Any]:
    translator = Translator(managed_policy_map=None, sam_parser=Parser(), boto_session=_session(region))
    try:
        return translator.translate(document, dict(parameters or {}), get_managed_policy_map=dict)
    except InvalidDocumentException as exc:
        reasons = "; ".join(str(cause) for cause in exc.causes)
        raise TransformError(f"SAM's translator refused {source}: {reasons}") from None
    finally:
        # The translator counts its work for a publisher; here there is none (a dummy that drops them).
        translator.metrics.publish()


@functools.cache
def _session(region: str) -> boto3.session.Session:
    """One session per region: the translator reads only its region, and a new session costs about a quarter
    of a translation, which the redeploy check makes some fifty times a run."""
    return boto3.session.Session(region_name=region)


@dataclass(frozen=True)
class Stack:
    """The resources of a transformed template that exist under given parameter values, resolved."""

    template: sam.Template
    resources: Mapping[str, Mapping[str, Any]]

    @classmethod
    def of(cls, document: Mapping[str, Any], parameters: Mapping[str, str], *, path: Path) -> Stack:
        """``path``: the template the document was transformed from."""
        template = sam.from_document(document, path, overrides=parameters, pseudo_parameters={})
        resources = {
            name: {**resource, "Properties": template.resolve(resource.get("Properties") or {})}
            for name, resource in (document.get("Resources") or {}).items()
            if resource.get("Condition") is None or template.condition(resource["Condition"]) is not False
        }
        return cls(template, resources)

    def of_type(self, kind: str) -> dict[str, Mapping[str, Any]]:
        return {name: resource for name, resource in self.resources.items() if resource.get("Type") == kind}

    def references(self, name: str) -> frozenset[str]:
        """The resources ``name`` waits for directly: ``DependsOn`` and what its properties refer to."""
        resource = self.resources[name]
        depends = resource.get("DependsOn") or []
        explicit = {depends} if isinstance(depends, str) else set(depends)
        return frozenset((explicit | set(sam.references(resource["Properties"]))) & set(self.resources))

    def depends_on(self, name: str) -> frozenset[str]:
        """Every resource CloudFormation finishes before it creates ``name``."""
        seen: set[str] = set()
        todo = [name]
        while todo:
            for reference in self.references(todo.pop()):
                if reference not in seen:
                    seen.add(reference)
                    todo.append(reference)
        return frozenset(seen)
