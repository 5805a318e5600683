"""The submitter portal: the JSON API (``/api/uploads…``, ``/api/submissions…``)
and the pages under ``/submit``.

Uploads are the resumable protocol of ``uploads.py``; everything a
submitter owns is visible to them and to admins only (others get a 404, as
if it did not exist). Nothing here runs a conformance check: it is queued
(``queue.py``) and a worker process runs it.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Path, Query, Request, Response, status
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse, RedirectResponse
from pydantic import ValidationError
from starlette.requests import ClientDisconnect

from proctor.core.domain import EndpointDialect, Role, Visibility
from proctor.core.errors import Conflict, FieldError
from proctor.policywire.wire import units
from proctor.runner.archive import human_bytes
from proctor.web.auth.identity import Principal
from proctor.web.deps import (
    AppStateDep,
    DbId,
    FormDep,
    NowDep,
    ResultsDep,
    SessionDep,
    SessionStateDep,
    SettingsDep,
    StoreDep,
    form_text,
    require_role,
)
from proctor.web.errors import error_responses
from proctor.web.submissions import service, staging, uploads
from proctor.web.submissions.schemas import (
    CompleteIn,
    EndpointIn,
    PolicyDetailOut,
    PolicyOut,
    PolicyPatch,
    SubmissionOut,
    UploadIn,
    UploadOut,
)
from proctor.web.templating import render

api_router = APIRouter(
    tags=["submissions"], responses=error_responses(401, 403, 404, 409, 413, 422, 507)
)
page_router = APIRouter()

Submitter = Annotated[Principal, require_role(Role.submitter)]
# owners act on what they own; admins on anything (the access check decides)
OwnerOrAdmin = Annotated[Principal, require_role(Role.submitter, Role.admin)]
Admin = Annotated[Principal, require_role(Role.admin)]
UploadId = Annotated[
    str, Path(pattern=r"^[0-9a-f]{32}$", description="the upload's id, from POST /api/uploads")
]
_WRITE_BUFFER = 1 << 20  # bytes gathered before each write to disk


def chunk_bytes(max_upload: int) -> int:
    """How much the page sends per request: 8 MiB (a dropped connection
    costs at most that), fewer when the limit itself is small."""
    return max(64 * 1024, min(8 * 2**20, max_upload // 16))


def upload_out(upload: Any, offset: int) -> UploadOut:
    return UploadOut(
        id=upload.id,
        filename=upload.filename,
        size_bytes=upload.size_bytes,
        offset=offset,
        sha256=upload.sha256,
        created_at=upload.created_at,
        updated_at=upload.updated_at,
        expires_at=upload.expires_at,
        complete=offset == upload.size_bytes,
    )


def _offset_or_gone(session: Any, settings: Any, upload: Any) -> int:
    try:
        return uploads.staged_offset(settings, upload)
    except uploads.StagedFileLost as exc:
        uploads.discard(session, settings=settings, upload=upload)
        session.commit()
        raise HTTPException(status.HTTP_410_GONE, str(exc)) from None


# -- uploads ------------------------------------------------------------------------
@api_router.post(
    "/uploads",
    status_code=201,
    summary="Begin a resumable checkpoint upload",
    response_model=UploadOut,
)
def create_upload(
    body: UploadIn, session: SessionDep, settings: SettingsDep, who: Submitter, now: NowDep
) -> UploadOut:
    try:
        upload = uploads.create_upload(
            session,
            settings=settings,
            owner=who.user,
            filename=body.filename,
            size_bytes=body.size_bytes,
            sha256=body.sha256,
            now=now,
            show_room=who.has_role(Role.admin),
        )
    except uploads.UploadTooLarge as exc:
        raise HTTPException(status.HTTP_413_CONTENT_TOO_LARGE, str(exc)) from None
    except uploads.NoRoomForUpload as exc:
        raise HTTPException(status.HTTP_507_INSUFFICIENT_STORAGE, str(exc)) from None
    return upload_out(upload, 0)


@api_router.get("/uploads", summary="My unfinished uploads (to resume one)")
def list_uploads(session: SessionDep, settings: SettingsDep, who: Submitter) -> list[UploadOut]:
    out = []
    for upload in uploads.list_uploads(session, who):
        size = staging.size(staging.upload_dir(settings), upload.id)
        if size is not None:
            out.append(upload_out(upload, min(size, upload.received_bytes)))
    return out


@api_router.get(
    "/uploads/{upload_id}", summary="An upload's offset: where to resume", response_model=UploadOut
)
def get_upload(
    upload_id: UploadId, session: SessionDep, settings: SettingsDep, who: Submitter
) -> UploadOut:
    upload = uploads.get_upload(session, who, upload_id)
    return upload_out(upload, _offset_or_gone(session, settings, upload))


@api_router.put(
    "/uploads/{upload_id}",
    summary="Append bytes at ?offset= (the upload's current offset)",
    response_model=UploadOut,
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {
                "application/octet-stream": {"schema": {"type": "string", "format": "binary"}}
            },
        }
    },
)
async def put_bytes(
    upload_id: UploadId,
    request: Request,
    state: AppStateDep,
    session: SessionDep,
    settings: SettingsDep,
    who: Submitter,
    now: NowDep,
    offset: Annotated[int, Query(ge=0, le=2**62, description="where these bytes go")],
) -> UploadOut:
    upload = await run_in_threadpool(uploads.get_upload, session, who, upload_id, write=True)
    current = await run_in_threadpool(_offset_or_gone, session, settings, upload)
    if offset != current:
        raise HTTPException(
            status.HTTP_409_CONFLICT,
            f"offset: the upload is at byte {current}; send the next bytes from there",
            headers={"Upload-Offset": str(current)},
        )
    room = upload.size_bytes - offset
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > room:
        raise HTTPException(
            status.HTTP_413_CONTENT_TOO_LARGE,
            f"the upload is {upload.size_bytes} bytes and {offset} are in: this request may "
            f"carry at most {room} more, not {declared}",
        )
    folder = staging.upload_dir(settings)
    written = 0
    recorded = 0  # of written: fsynced and its offset committed
    every = settings.submissions.upload_progress_bytes
    overflow = False
    disconnected = False
    try:
        lock = staging.locked(folder, upload.id)
        f = lock.__enter__()
    except staging.UploadBusy as exc:
        raise HTTPException(status.HTTP_409_CONFLICT, str(exc)) from None
    except FileNotFoundError:
        raise HTTPException(status.HTTP_410_GONE, str(uploads.StagedFileLost())) from None
    try:
        await run_in_threadpool(f.truncate, offset)
        f.seek(offset)
        buffer = bytearray()
        try:
            async for chunk in request.stream():
                if written + len(buffer) + len(chunk) > room:
                    overflow = True
                    break
                buffer += chunk
                if len(buffer) >= _WRITE_BUFFER:
                    await run_in_threadpool(f.write, bytes(buffer))
                    written += len(buffer)
                    buffer.clear()
                if written - recorded >= every:
                    # a server crash from here on keeps these bytes: fsync, then
                    # commit the offset (bytes first, so it never runs ahead)
                    await run_in_threadpool(staging.sync, f)
                    await run_in_threadpool(
                        uploads.record_progress_now,
                        state.session_factory,
                        settings=settings,
                        upload_id=upload.id,
                        received=offset + written,
                        now=now,
                    )
                    recorded = written
        except ClientDisconnect:
            disconnected = True  # keep what arrived: the client resumes from there
        if overflow:
            await run_in_threadpool(f.truncate, offset)
            if recorded:  # the offset recorded on the way must go back with the bytes
                await run_in_threadpool(
                    uploads.record_progress_now,
                    state.session_factory,
                    settings=settings,
                    upload_id=upload.id,
                    received=offset,
                    now=now,
                    rewind=True,
                )
        else:
            if buffer:
                await run_in_threadpool(f.write, bytes(buffer))
                written += len(buffer)
            await run_in_threadpool(staging.sync, f)
    finally:
        lock.__exit__(None, None, None)
    if overflow:
        raise HTTPException(
            status.HTTP_413_CONTENT_TOO_LARGE,
            f"the upload is {upload.size_bytes} bytes and {offset} were in: this request "
            f"sent more than the {room} left; nothing of it was kept",
        )
    await run_in_threadpool(
        uploads.record_progress,
        session,
        settings=settings,
        upload=upload,
        received=offset + written,
        now=now,
    )
    if disconnected:
        return Response(status_code=400)  # nobody is listening; the offset is recorded
    return upload_out(upload, offset + written)


@api_router.post(
    "/uploads/{upload_id}/complete",
    status_code=201,
    summary="Check, store and submit a fully received checkpoint",
    response_model=SubmissionOut,
    responses={
        422: {"description": "rejected: the upload is deleted; each problem names its field"}
    },
)
def complete_upload(
    upload_id: UploadId,
    session: SessionDep,
    settings: SettingsDep,
    store: StoreDep,
    who: Submitter,
    now: NowDep,
    body: CompleteIn | None = None,
) -> Any:
    upload = uploads.get_upload(session, who, upload_id, write=True)
    try:
        sub = uploads.complete_upload(
            session,
            settings=settings,
            store=store,
            upload=upload,
            owner=who.user,
            sha256=body.sha256 if body else None,
            now=now,
        )
    except uploads.UploadRejected as exc:
        # the deletion of the upload is committed with this answer
        return JSONResponse({"detail": exc.detail()}, status_code=422)
    except uploads.StagedFileLost as exc:
        uploads.discard(session, settings=settings, upload=upload)
        session.commit()
        raise HTTPException(status.HTTP_410_GONE, str(exc)) from None
    except staging.UploadBusy as exc:
        raise Conflict(str(exc)) from None
    return service.submission_out(session, sub)


@api_router.delete("/uploads/{upload_id}", status_code=204, summary="Cancel an upload")
def cancel_upload(
    upload_id: UploadId, session: SessionDep, settings: SettingsDep, who: Submitter
) -> Response:
    upload = uploads.get_upload(session, who, upload_id, write=True)
    uploads.discard(session, settings=settings, upload=upload)
    return Response(status_code=204)


# -- policies and submissions ------------------------------------------------------------
@api_router.get("/submissions/policies", summary="My policies (admins: all)")
def list_policies(session: SessionDep, who: OwnerOrAdmin) -> list[PolicyOut]:
    return [service.policy_out(session, p) for p in service.list_policies(session, who)]


@api_router.get(
    "/submissions/policies/{policy_id}",
    summary="A policy: its submissions, campaign progress and private results",
    response_model=PolicyDetailOut,
)
def get_policy(
    policy_id: DbId, session: SessionDep, who: OwnerOrAdmin, results: ResultsDep
) -> PolicyDetailOut:
    policy = service.get_policy(session, who, policy_id)
    return service.policy_detail(session, policy, who, results=results)


@api_router.patch(
    "/submissions/policies/{policy_id}",
    summary="Opt in to (or out of) the public board; edit the description",
    response_model=PolicyOut,
)
def patch_policy(
    policy_id: DbId, body: PolicyPatch, session: SessionDep, who: OwnerOrAdmin, now: NowDep
) -> PolicyOut:
    policy = service.get_policy(session, who, policy_id)
    service.update_policy(session, policy=policy, patch=body, actor=who.user, now=now)
    return service.policy_out(session, policy)


@api_router.post(
    "/submissions/endpoints",
    status_code=201,
    summary="Register a policy server (queues its conformance check)",
    response_model=SubmissionOut,
    responses=error_responses(503),
)
def register_endpoint(
    body: EndpointIn, session: SessionDep, settings: SettingsDep, who: Submitter, now: NowDep
) -> SubmissionOut:
    sub = service.register_endpoint(session, settings=settings, owner=who.user, body=body, now=now)
    return service.submission_out(session, sub)


@api_router.get(
    "/submissions/{submission_id}",
    summary="A submission and its conformance report",
    response_model=SubmissionOut,
)
def get_submission(submission_id: DbId, session: SessionDep, who: OwnerOrAdmin) -> SubmissionOut:
    return service.submission_out(session, service.get_submission(session, who, submission_id))


@api_router.post(
    "/submissions/{submission_id}/check",
    status_code=202,
    summary="Run the conformance check again",
    response_model=SubmissionOut,
)
def recheck(
    submission_id: DbId,
    session: SessionDep,
    settings: SettingsDep,
    who: OwnerOrAdmin,
    now: NowDep,
) -> SubmissionOut:
    sub = service.get_submission(session, who, submission_id)
    service.request_check(session, settings=settings, sub=sub, actor=who.user, now=now)
    return service.submission_out(session, sub)


# -- pages ----------------------------------------------------------------------------
def _portal(
    request: Request,
    session: Any,
    settings: Any,
    who: Principal,
    *,
    errors: dict[str, str] | None = None,
    values: dict[str, str] | None = None,
    status_code: int = 200,
) -> Response:
    policies = [service.policy_out(session, p) for p in service.list_policies(session, who)]
    return render(
        request,
        "submissions/index.html",
        {
            "policies": policies,
            "open_uploads": [
                upload_out(
                    u, min(staging.size(staging.upload_dir(settings), u.id) or 0, u.received_bytes)
                )
                for u in uploads.list_uploads(session, who)
            ],
            "max_upload": human_bytes(settings.submissions.max_upload_bytes),
            "max_upload_bytes": settings.submissions.max_upload_bytes,
            "chunk_bytes": chunk_bytes(settings.submissions.max_upload_bytes),
            "dialects": [d for d in EndpointDialect],
            # the action-unit conventions an endpoint may select, with what each means
            "action_units": [(n, units.get(n).summary) for n in units.names()],
            "errors": errors or {},
            "values": values or {},
            "is_submitter": who.has_role(Role.submitter),
        },
        status_code=status_code,
    )


@page_router.get("/submit")
def portal(
    request: Request, session: SessionDep, settings: SettingsDep, who: OwnerOrAdmin
) -> Response:
    return _portal(request, session, settings, who)


_ENDPOINT_FIELDS = (
    "policy_name",
    "description",
    "url",
    "dialect",
    "exterior_numbering",
    "action_units",
    "api_key",
    "action_space",
    "chunk_length",
    "deterministic",
)


@page_router.post("/submit/endpoints")
def register_endpoint_form(
    request: Request,
    form: FormDep,
    session: SessionDep,
    settings: SettingsDep,
    state: SessionStateDep,
    who: Submitter,
    now: NowDep,
) -> Response:
    values = {k: form_text(form, k) for k in _ENDPOINT_FIELDS}
    raw: dict[str, Any] = {
        "policy_name": values["policy_name"],
        "description": values["description"],
        "url": values["url"],
        "dialect": values["dialect"] or "openpi",
        "exterior_numbering": values["exterior_numbering"] or None,
        "action_units": values["action_units"] or None,
        "api_key": values["api_key"] or None,
        "action_space": values["action_space"] or None,
        "chunk_length": values["chunk_length"] or None,
        "deterministic": values["deterministic"] == "on",
    }
    values.pop("api_key")  # never echoed back into the page
    try:
        body = EndpointIn.model_validate(raw)
        sub = service.register_endpoint(
            session, settings=settings, owner=who.user, body=body, now=now
        )
    except ValidationError as exc:
        session.rollback()
        errors = {str(e["loc"][0]) if e["loc"] else "form": e["msg"] for e in exc.errors()}
        return _portal(
            request, session, settings, who, errors=errors, values=values, status_code=422
        )
    except FieldError as exc:
        session.rollback()
        return _portal(
            request,
            session,
            settings,
            who,
            errors={exc.field: exc.message},
            values=values,
            status_code=422,
        )
    except Conflict as exc:
        session.rollback()
        field, _, message = str(exc).partition(": ")
        errors = {field: message} if message and field in _ENDPOINT_FIELDS else {"form": str(exc)}
        return _portal(
            request, session, settings, who, errors=errors, values=values, status_code=409
        )
    state.flash("Endpoint registered: its conformance check is queued.")
    return RedirectResponse(f"/submit/submissions/{sub.id}", status_code=303)


@page_router.get("/submit/policies/{policy_id}")
def policy_page(
    policy_id: DbId, request: Request, session: SessionDep, who: OwnerOrAdmin, results: ResultsDep
) -> Response:
    policy = service.get_policy(session, who, policy_id)
    detail = service.policy_detail(session, policy, who, results=results)
    return render(request, "submissions/policy.html", {"policy": detail, "Visibility": Visibility})


@page_router.post("/submit/policies/{policy_id}/visibility")
def visibility_form(
    policy_id: DbId,
    form: FormDep,
    session: SessionDep,
    state: SessionStateDep,
    who: OwnerOrAdmin,
    now: NowDep,
) -> Response:
    policy = service.get_policy(session, who, policy_id)
    try:
        choice = Visibility(form_text(form, "visibility"))
    except ValueError:
        raise FieldError("visibility", "choose public or private") from None
    service.update_policy(
        session, policy=policy, patch=PolicyPatch(visibility=choice), actor=who.user, now=now
    )
    state.flash(
        "Your policy may appear on the public board once a campaign is released."
        if choice == Visibility.public
        else "Your policy is private: it stays off the public board."
    )
    return RedirectResponse(f"/submit/policies/{policy.id}", status_code=303)


@page_router.get("/submit/submissions/{submission_id}")
def submission_page(
    submission_id: DbId, request: Request, session: SessionDep, who: OwnerOrAdmin
) -> Response:
    sub = service.get_submission(session, who, submission_id)
    return render(
        request, "submissions/submission.html", {"sub": service.submission_out(session, sub)}
    )


@page_router.post("/submit/submissions/{submission_id}/check")
def recheck_form(
    submission_id: DbId,
    session: SessionDep,
    settings: SettingsDep,
    state: SessionStateDep,
    who: OwnerOrAdmin,
    now: NowDep,
) -> Response:
    sub = service.get_submission(session, who, submission_id)
    service.request_check(session, settings=settings, sub=sub, actor=who.user, now=now)
    state.flash("A new conformance check is queued.")
    return RedirectResponse(f"/submit/submissions/{sub.id}", status_code=303)


@page_router.get("/admin/runners")
def runners_page(request: Request, session: SessionDep, who: Admin) -> Response:
    """Every runner server, newest first: what each host serves, and why one failed."""
    return render(request, "submissions/runners.html", {"rows": service.runner_rows(session)})
