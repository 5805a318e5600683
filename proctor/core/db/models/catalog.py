"""What is evaluated and where: stations, object types, policies, submissions."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Mapped, mapped_column, relationship

from proctor.core.db.models.base import Base, created_at_column
from proctor.core.db.types import JSONType, UTCDateTime, enum_column
from proctor.core.domain import (
    ConformanceStatus,
    EndpointDialect,
    PolicyKind,
    SubmissionKind,
    Visibility,
)


class Station(Base):
    __tablename__ = "stations"

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(sa.String(64), unique=True)
    profile: Mapped[str] = mapped_column(sa.String(16), default="sim")  # sim | twin | real
    description: Mapped[str] = mapped_column(sa.Text, default="")
    config: Mapped[dict[str, Any]] = mapped_column(JSONType, default=dict)
    # where the cell stands (a lab, a building) and what kind of cell it is (its
    # robot, gripper and layout, e.g. ``droid-fr3-2f85``): set from the station's
    # config when it registers; a campaign accepts some cell profiles only, and
    # results break down by site. None: not declared (accepted by an open campaign)
    site: Mapped[str | None] = mapped_column(sa.String(64))
    cell_profile: Mapped[str | None] = mapped_column(sa.String(64))
    created_at: Mapped[datetime] = created_at_column()
    last_seen_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    # what the station said in its last hello on the station API: its software,
    # a hash of its cell layout (a changed cell shows on the server) and its
    # clock's offset from the server's (added to its wall times when it syncs)
    software_version: Mapped[str | None] = mapped_column(sa.String(64))
    layout_hash: Mapped[str | None] = mapped_column(sa.String(64))
    clock_offset_s: Mapped[float | None]


class ObjectType(Base):
    """A kind of item the station picks (e.g. ``spoons``), with tags such as
    rigid / deformable / articulated / small used to group results."""

    __tablename__ = "object_types"

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(sa.String(64), unique=True)
    display_name: Mapped[str] = mapped_column(sa.String(128), default="")
    tags: Mapped[list[str]] = mapped_column(JSONType, default=list)
    description: Mapped[str] = mapped_column(sa.Text, default="")
    # the language instruction sent to policies for this object
    prompt: Mapped[str] = mapped_column(sa.Text, default="")
    created_at: Mapped[datetime] = created_at_column()


class Policy(Base):
    """A submitted policy, or the human reference (``kind == reference``)."""

    __tablename__ = "policies"

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(sa.String(128), unique=True)
    kind: Mapped[PolicyKind] = mapped_column(
        enum_column(PolicyKind, "policy_kind"), default=PolicyKind.policy
    )
    owner_id: Mapped[int | None] = mapped_column(sa.ForeignKey("users.id"), index=True)
    visibility: Mapped[Visibility] = mapped_column(
        enum_column(Visibility, "visibility"), default=Visibility.private
    )
    description: Mapped[str] = mapped_column(sa.Text, default="")
    created_at: Mapped[datetime] = created_at_column()

    submissions: Mapped[list[Submission]] = relationship(
        back_populates="policy", order_by="Submission.id"
    )


class Submission(Base):
    """One version of a policy: an uploaded checkpoint, a registered endpoint, or
    (the human reference only) the teleop server each station host serves itself."""

    __tablename__ = "submissions"
    __table_args__ = (
        sa.CheckConstraint(
            "(kind = 'checkpoint' AND checkpoint_sha256 IS NOT NULL)"
            " OR (kind = 'endpoint' AND endpoint_url IS NOT NULL)"
            " OR (kind = 'teleop' AND endpoint_url IS NOT NULL)",
            name="kind_has_payload",
        ),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    policy_id: Mapped[int] = mapped_column(sa.ForeignKey("policies.id"), index=True)
    kind: Mapped[SubmissionKind] = mapped_column(enum_column(SubmissionKind, "submission_kind"))
    # use_alter: submissions → artifacts → episodes → assignments → submissions is a cycle
    checkpoint_artifact_id: Mapped[int | None] = mapped_column(
        sa.ForeignKey("artifacts.id", use_alter=True)
    )
    checkpoint_sha256: Mapped[str | None] = mapped_column(sa.String(64))
    # policy.toml, validated; names the runner for checkpoint submissions
    manifest: Mapped[dict[str, Any]] = mapped_column(JSONType, default=dict)
    endpoint_url: Mapped[str | None] = mapped_column(sa.String(512))
    endpoint_dialect: Mapped[EndpointDialect | None] = mapped_column(
        enum_column(EndpointDialect, "endpoint_dialect")
    )
    # encrypted with the server's key from the environment, never stored in clear
    endpoint_api_key_encrypted: Mapped[bytes | None] = mapped_column(sa.LargeBinary)
    conformance_status: Mapped[ConformanceStatus] = mapped_column(
        enum_column(ConformanceStatus, "conformance_status"), default=ConformanceStatus.pending
    )
    conformance_report: Mapped[dict[str, Any]] = mapped_column(JSONType, default=dict)
    submitted_by_id: Mapped[int | None] = mapped_column(sa.ForeignKey("users.id"))
    created_at: Mapped[datetime] = created_at_column()

    policy: Mapped[Policy] = relationship(back_populates="submissions")
