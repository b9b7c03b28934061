"""Blobs, containers and leases in the simulated account: the REST operations the app calls (see
`sim.storage.transport`)."""

from __future__ import annotations

from xml.sax.saxutils import escape

from azure.core.utils import CaseInsensitiveDict

from sim.storage.account import (
    ACCOUNT,
    Answer,
    Blob,
    Lease,
    Reply,
    ServerBase,
    _meta,
    _meta_headers,
    _meta_xml,
    http_date,
    listing,
)


class BlobOps(ServerBase):
    # ---- blobs ----------------------------------------------------------------------------------------------
    def _blob_op(
        self, method: str, parts: list[str], query: dict[str, str], headers: CaseInsensitiveDict, body: bytes
    ) -> tuple[str, Reply]:
        container = parts[0] if parts else ""
        blob = "/".join(parts[1:])
        comp = query.get("comp")
        if not blob:
            if method == "PUT" and query.get("restype") == "container":
                return "CreateContainer", self.serve("CreateContainer", lambda: self.create_container(container))
            if method == "GET" and comp == "list":
                return "ListBlobs", self.serve("ListBlobs", lambda: self.list_blobs(container, query))
            return "Unsupported", self.serve("Unsupported", self._unsupported)
        if method == "PUT" and comp == "lease":
            reply = self.serve("LeaseBlob", lambda: self.lease(container, blob, headers))
            if reply.status < 300 and self.observe is not None:  # a lease's tenure (`sim.lapses`)
                lease = self._blob(container, blob).lease
                lease_id = reply.headers.get("x-ms-lease-id") or headers.get("x-ms-lease-id") or ""
                action = headers.get("x-ms-lease-action", "")
                self.observe("LeaseBlob", self.caller, (action, blob, lease_id, lease and lease.expires_s))
            return "LeaseBlob", reply
        if method == "PUT" and comp == "metadata":
            return "SetBlobMetadata", self.serve(
                "SetBlobMetadata", lambda: self.set_blob_metadata(container, blob, headers)
            )
        if method == "PUT" and comp is None:
            return "PutBlob", self.serve("PutBlob", lambda: self.put_blob(container, blob, headers, body))
        if method == "GET" and comp is None:
            return "GetBlob", self.serve("GetBlob", lambda: self.get_blob(container, blob, headers))
        if method == "HEAD":
            return "GetBlobProperties", self.serve("GetBlobProperties", lambda: self.blob_properties(container, blob))
        if method == "DELETE":
            return "DeleteBlob", self.serve("DeleteBlob", lambda: self.delete_blob(container, blob, headers))
        return "Unsupported", self.serve("Unsupported", self._unsupported)

    def _container(self, name: str) -> dict[str, Blob]:
        found = self.account.containers.get(name)
        if found is None:
            raise Answer(404, "ContainerNotFound", "The specified container does not exist.")
        return found

    def _blob(self, container: str, name: str) -> Blob:
        found = self._container(container).get(name)
        if found is None:
            raise Answer(404, "BlobNotFound", "The specified blob does not exist.")
        return found

    def create_container(self, name: str) -> Reply:
        if name in self.account.containers:
            raise Answer(409, "ContainerAlreadyExists", "The specified container already exists.")
        self.account.containers[name] = {}
        return Reply(201, {"ETag": self._new_etag(), "Last-Modified": http_date(self.now())})

    def _lease_state(self, blob: Blob) -> str:
        lease = blob.lease
        if lease is None:
            return "broken" if blob.broken else "available"
        now = self.now()
        if lease.broken_s is not None:
            if now >= lease.broken_s:
                blob.lease, blob.broken = None, True
                return "broken"
            return "breaking"
        if lease.expires_s is not None and now >= lease.expires_s:
            return "expired"
        return "leased"

    def _check_lease_for_write(self, blob: Blob | None, headers: CaseInsensitiveDict) -> None:
        given = headers.get("x-ms-lease-id")
        if blob is None:
            if given:
                raise Answer(412, "LeaseNotPresentWithBlobOperation", "There is currently no lease on the blob.")
            return
        state = self._lease_state(blob)
        active = state in ("leased", "breaking")
        if active and not given:
            raise Answer(412, "LeaseIdMissing", "There is currently a lease on the blob and no lease ID was specified.")
        if active and blob.lease is not None and given != blob.lease.id:
            raise Answer(412, "LeaseIdMismatchWithBlobOperation", "The lease ID specified did not match.")
        if not active and given:
            raise Answer(412, "LeaseNotPresentWithBlobOperation", "There is currently no lease on the blob.")

    def _check_conditions(self, blob: Blob | None, headers: CaseInsensitiveDict) -> None:
        if_match, if_none = headers.get("If-Match"), headers.get("If-None-Match")
        if if_none == "*" and blob is not None:
            raise Answer(409, "BlobAlreadyExists", "The specified blob already exists.")
        if if_match is not None and (blob is None or (if_match != "*" and if_match != blob.etag)):
            if blob is None:
                raise Answer(404, "BlobNotFound", "The specified blob does not exist.")
            raise Answer(412, "ConditionNotMet", "The condition specified using HTTP conditional header(s) is not met.")
        if if_none not in (None, "*") and blob is not None and if_none == blob.etag:
            raise Answer(412, "ConditionNotMet", "The condition specified using HTTP conditional header(s) is not met.")

    def put_blob(self, container: str, name: str, headers: CaseInsensitiveDict, body: bytes) -> Reply:
        blobs = self._container(container)
        existing = blobs.get(name)
        self._check_conditions(existing, headers)
        self._check_lease_for_write(existing, headers)
        now = self.now()
        blob = Blob(
            body,
            self._new_etag(),
            existing.created_s if existing else now,
            now,
            _meta(headers),
            headers.get("x-ms-blob-content-type"),
            headers.get("x-ms-blob-content-encoding"),
        )
        if existing is not None:
            blob.lease, blob.broken = existing.lease, existing.broken
        blobs[name] = blob
        return Reply(201, {"ETag": blob.etag, "Last-Modified": http_date(now)})

    def _properties(self, blob: Blob) -> dict[str, str]:
        state = self._lease_state(blob)
        head = {
            "ETag": blob.etag,
            "Last-Modified": http_date(blob.modified_s),
            "x-ms-creation-time": http_date(blob.created_s),
            "x-ms-blob-type": "BlockBlob",
            "x-ms-lease-state": state,
            "x-ms-lease-status": "locked" if state in ("leased", "breaking") else "unlocked",
            **_meta_headers(blob.metadata),
        }
        if state == "leased" and blob.lease is not None:
            head["x-ms-lease-duration"] = "infinite" if blob.lease.expires_s is None else "fixed"
        if blob.content_type:
            head["Content-Type"] = blob.content_type
        if blob.content_encoding:
            head["Content-Encoding"] = blob.content_encoding
        return head

    def get_blob(self, container: str, name: str, headers: CaseInsensitiveDict) -> Reply:
        blob = self._blob(container, name)
        head = self._properties(blob)
        wanted = headers.get("x-ms-range") or headers.get("Range")
        size = len(blob.data)
        if wanted is None:
            return Reply(200, {**head, "Content-Length": str(size)}, blob.data)
        first, _, last = wanted.removeprefix("bytes=").partition("-")
        start = int(first)
        if start >= size:
            raise Answer(416, "InvalidRange", "The range specified is invalid for the current size of the resource.")
        end = min(int(last) if last else size - 1, size - 1)
        data = blob.data[start : end + 1]
        head |= {"Content-Length": str(len(data)), "Content-Range": f"bytes {start}-{end}/{size}"}
        return Reply(206, head, data)

    def blob_properties(self, container: str, name: str) -> Reply:
        blob = self._blob(container, name)
        return Reply(200, {**self._properties(blob), "Content-Length": str(len(blob.data))})

    def set_blob_metadata(self, container: str, name: str, headers: CaseInsensitiveDict) -> Reply:
        blob = self._blob(container, name)
        self._check_conditions(blob, headers)
        self._check_lease_for_write(blob, headers)
        blob.metadata = _meta(headers)
        blob.etag, blob.modified_s = self._new_etag(), self.now()
        return Reply(200, {"ETag": blob.etag, "Last-Modified": http_date(blob.modified_s)})

    def delete_blob(self, container: str, name: str, headers: CaseInsensitiveDict) -> Reply:
        blob = self._blob(container, name)
        self._check_conditions(blob, headers)
        self._check_lease_for_write(blob, headers)
        del self._container(container)[name]
        return Reply(202)

    def list_blobs(self, container: str, query: dict[str, str]) -> Reply:
        blobs = self._container(container)
        listed = listing(blobs, query, self.list_max)
        items = []
        for n in listed.page:
            blob = blobs[n]
            state = self._lease_state(blob)
            status = "locked" if state in ("leased", "breaking") else "unlocked"
            duration = ""
            if state == "leased" and blob.lease is not None:
                duration = f"<LeaseDuration>{'infinite' if blob.lease.expires_s is None else 'fixed'}</LeaseDuration>"
            content = f"<Content-Type>{escape(blob.content_type)}</Content-Type>" if blob.content_type else ""
            if blob.content_encoding:
                content += f"<Content-Encoding>{escape(blob.content_encoding)}</Content-Encoding>"
            items.append(
                f"<Blob><Name>{escape(n)}</Name><Properties><Creation-Time>{http_date(blob.created_s)}</Creation-Time>"
                f"<Last-Modified>{http_date(blob.modified_s)}</Last-Modified><Etag>{blob.etag}</Etag>"
                f"<Content-Length>{len(blob.data)}</Content-Length>{content}<BlobType>BlockBlob</BlobType>"
                f"<LeaseStatus>{status}</LeaseStatus><LeaseState>{state}</LeaseState>{duration}</Properties>"
                f"{_meta_xml(blob.metadata) if listed.with_meta else ''}</Blob>"
            )
        marker = f"<Marker>{escape(listed.marker)}</Marker>" if listed.marker else ""
        xml = (
            f'<?xml version="1.0" encoding="utf-8"?><EnumerationResults ServiceEndpoint="http://127.0.0.1/{ACCOUNT}/" '
            f'ContainerName="{container}"><Prefix>{escape(listed.prefix)}</Prefix>'
            f"{marker}<MaxResults>{listed.most}</MaxResults>"
            f"<Blobs>{''.join(items)}</Blobs>"
            f"<NextMarker>{escape(listed.next)}</NextMarker></EnumerationResults>"
        )
        return Reply(200, {"Content-Type": "application/xml"}, xml.encode())

    def lease(self, container: str, name: str, headers: CaseInsensitiveDict) -> Reply:
        blob = self._blob(container, name)
        action = headers.get("x-ms-lease-action", "")
        given = headers.get("x-ms-lease-id")
        state = self._lease_state(blob)
        now = self.now()
        lease = blob.lease
        if action == "acquire":
            duration = int(headers.get("x-ms-lease-duration", "-1"))
            proposed = headers.get("x-ms-proposed-lease-id") or self._lease_id()
            if state in ("leased",) and lease is not None and lease.id != proposed:
                raise Answer(409, "LeaseAlreadyPresent", "There is already a lease present.")
            if state == "breaking":
                raise Answer(409, "LeaseIsBreakingAndCannotBeAcquired", "The lease is breaking.")
            span = None if duration == -1 else duration
            blob.lease = Lease(proposed, span, None if span is None else now + span)
            blob.broken = False
            return Reply(
                201, {"x-ms-lease-id": proposed, "ETag": blob.etag, "Last-Modified": http_date(blob.modified_s)}
            )
        if lease is None or given != lease.id:
            if lease is None:
                raise Answer(409, "LeaseNotPresentWithLeaseOperation", "There is currently no lease on the blob.")
            if action == "break":
                pass
            else:
                raise Answer(409, "LeaseIdMismatchWithLeaseOperation", "The lease ID specified did not match.")
        if action == "renew":
            if state == "breaking" or blob.broken:
                raise Answer(409, "LeaseIsBrokenAndCannotBeRenewed", "The lease is broken.")
            # The service keeps the duration the lease was acquired with; a renewal restarts it.
            lease.expires_s = None if lease.span_s is None else now + lease.span_s
            return Reply(
                200, {"x-ms-lease-id": lease.id, "ETag": blob.etag, "Last-Modified": http_date(blob.modified_s)}
            )
        if action == "release":
            blob.lease = None
            return Reply(200, {"ETag": blob.etag, "Last-Modified": http_date(blob.modified_s)})
        if action == "change":
            lease.id = headers.get("x-ms-proposed-lease-id", lease.id)
            return Reply(
                200, {"x-ms-lease-id": lease.id, "ETag": blob.etag, "Last-Modified": http_date(blob.modified_s)}
            )
        if action == "break":
            period = int(headers.get("x-ms-lease-break-period", "0") or 0)
            if period <= 0 or state == "expired":
                blob.lease, blob.broken = None, True
                return Reply(202, {"x-ms-lease-time": "0", "ETag": blob.etag})
            lease.broken_s = now + period
            return Reply(202, {"x-ms-lease-time": str(period), "ETag": blob.etag})
        raise Answer(400, "InvalidHeaderValue", f"lease action {action!r}")

    def _lease_id(self) -> str:
        value = self.rng.getrandbits(128)
        h = f"{value:032x}"
        return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"
