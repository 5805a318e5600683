"""The whole schema. Import from here so that every table is registered on
``Base.metadata`` before Alembic or ``create_all`` looks at it."""

from proctor.core.db.models.analysis import AnalysisSnapshot, AnalysisSubsetResult
from proctor.core.db.models.annotation import AnnotationCandidate, PlacementEvent, ReviewAction
from proctor.core.db.models.base import Base
from proctor.core.db.models.campaigns import Assignment, Campaign, CampaignObject, CampaignPolicy
from proctor.core.db.models.catalog import ObjectType, Policy, Station, Submission
from proctor.core.db.models.episodes import Artifact, Episode, EpisodeEvent
from proctor.core.db.models.people import ApiToken, AuditLog, User, UserRole
from proctor.core.db.models.runners import RunnerHost, RunnerServer
from proctor.core.db.models.station_requests import StationRequest
from proctor.core.db.models.station_tokens import StationToken
from proctor.core.db.models.station_uploads import StationUpload
from proctor.core.db.models.submissions import ConformanceRun, UploadSession
from proctor.core.db.models.system import CacheGeneration

__all__ = [
    "AnalysisSnapshot",
    "AnalysisSubsetResult",
    "AnnotationCandidate",
    "ApiToken",
    "Artifact",
    "Assignment",
    "AuditLog",
    "Base",
    "CacheGeneration",
    "Campaign",
    "CampaignObject",
    "CampaignPolicy",
    "ConformanceRun",
    "Episode",
    "EpisodeEvent",
    "ObjectType",
    "PlacementEvent",
    "Policy",
    "ReviewAction",
    "RunnerHost",
    "RunnerServer",
    "Station",
    "StationRequest",
    "StationToken",
    "StationUpload",
    "Submission",
    "UploadSession",
    "User",
    "UserRole",
]
