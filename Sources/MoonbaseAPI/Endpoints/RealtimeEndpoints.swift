import MoonbaseCore
import MoonbaseHTTP
import MoonbaseJSON
import MoonbaseQuota
import MoonbaseRealtime
import MoonbaseStore

/// `GET /parse/changes/CLASS` (the change feed, one unit) and `GET /parse/live/CLASS`
/// (Server-Sent Events, one unit to open; events are counted, not charged).
enum RealtimeEndpoints {
    static func routes(_ s: Services) -> [(String, String, Endpoint)] {
        [
            ("GET", "/parse/changes/:className", Endpoint("changes.read", access: .app) { req throws(ParseError) in
                let className = req.param("className")
                req.target = .class(className)
                let http = req.http
                let since = try seq(http.queryValue("since"), name: "since") ?? 0
                var limit = 100
                if let l = http.queryValue("limit") {
                    guard let n = Int(l), n >= 0 else { throw ParseError(.invalidQuery, "limit must be a non-negative integer") }
                    limit = min(n, 1000)
                }
                let (w, keys) = try whereAndKeys(http)
                req.meter.dbReads += 1
                let page = try s.realtime.hub.changes(className, since: since, limit: max(limit, 1), where: w, keys: keys,
                                                      viewer: viewer(req))
                return .json(200, JSON.encode(changesBody(page, className: className, limit: limit)))
            }),
            ("GET", "/parse/live/:className", Endpoint("live.sse", access: .app) { req throws(ParseError) in
                let className = req.param("className")
                req.target = .class(className)
                return try openStream(s, req, className: className)
            }),
        ]
    }

    /// `{"results":[{"seq","op","className","object"|"objectId"}],"next":SEQ}`.
    static func changesBody(_ page: ChangeHub.FeedPage, className: String, limit: Int) -> JSONValue {
        var results: [JSONValue] = []
        for item in page.items.prefix(limit) {
            var r = JSONObject()
            r["seq"] = .int(item.seq)
            r["op"] = .string(item.op.rawValue)
            r["className"] = .string(className)
            if let o = item.object { r["object"] = .object(o) } else { r["objectId"] = .string(item.objectId) }
            results.append(.object(r))
        }
        let next = limit == 0 ? (page.items.first.map { $0.seq - 1 } ?? page.next) : page.next
        return .object(["results": .array(results), "next": .int(next)])
    }

    /// A sequence number from a query parameter or header: a non-negative integer.
    static func seq(_ raw: String?, name: String) throws(ParseError) -> Int64? {
        guard let raw, !raw.isEmpty else { return nil }
        guard let n = Int64(raw.trimmingWhitespace()), n >= 0 else {
            throw ParseError(.invalidQuery, "\(name) must be a non-negative sequence number")
        }
        return n
    }

    static func whereAndKeys(_ http: HTTPRequest) throws(ParseError) -> (JSONValue?, [String]?) {
        var w: JSONValue?
        if let text = http.queryValue("where"), !text.isEmpty {
            let v = try JSON.parse(Array(text.utf8))
            guard v.objectValue != nil || v.isNull else { throw ParseError(.invalidQuery, "where must be a JSON object") }
            w = v
        }
        let keys = http.queryValue("keys").map { $0.split(separator: ",").map(String.init) }
        for k in keys ?? [] where !Naming.isValidFieldPath(k) { throw ParseError(.invalidKeyName, "invalid field name: \(k)") }
        return (w, keys)
    }

    static func viewer(_ req: APIRequest) -> Viewer {
        if req.isMaster { return .master }
        return Viewer(identity: req.identity, sessionToken: req.identity.userId != nil ? req.sessionToken : nil)
    }

    /// Opens an SSE stream: `Last-Event-ID` (or `since`) replays the changes after it first.
    static func openStream(_ s: Services, _ req: APIRequest, className: String) throws(ParseError) -> HTTPResponse {
        let http = req.http
        let rt = s.realtime
        let (w, keys) = try whereAndKeys(http)
        let watch = http.queryValue("watch").map { $0.split(separator: ",").map(String.init) }
        var since = try seq(http.header("last-event-id"), name: "Last-Event-ID")
        if since == nil { since = try seq(http.queryValue("since"), name: "since") }
        let stream = HTTPStreamBody(maxBuffered: rt.config.streamBufferBytes)
        let sink = SSESink(stream: stream, ip: http.remoteAddress, userId: req.identity.userId, service: rt, quota: s.quota)
        try rt.admit(sink)
        let id: SubscriptionID
        do {
            id = try rt.hub.subscribe(SubscriptionSpec(className: className, whereClause: w, keys: keys, watch: watch, since: since),
                                      viewer: viewer(req), sink: sink)
        } catch {
            rt.release(sink)
            throw error
        }
        let hub = rt.hub
        stream.onClose { [unowned(unsafe) rt] in
            hub.unsubscribe(id)
            rt.release(sink)
        }
        stream.write(Array(": connected\n\n".utf8))
        var r = HTTPResponse(status: 200, headers: [
            ("Content-Type", "text/event-stream; charset=utf-8"), ("Cache-Control", "no-cache"), ("X-Accel-Buffering", "no"),
        ])
        r.stream = stream
        return r
    }

    /// A browser's `EventSource` cannot send headers: on `/parse/live/…` the query parameters
    /// `_ApplicationId` and `_SessionToken` stand for them. They are moved into headers and
    /// removed from the query, so no log or handler sees the token in a URL.
    static func liftQueryCredentials(_ request: inout HTTPRequest) {
        guard request.path.hasPrefix("/parse/live/") else { return }
        let map = [("_ApplicationId", "x-parse-application-id"), ("_SessionToken", "x-parse-session-token")]
        var lifted = false
        for (param, header) in map {
            guard let v = request.queryValue(param) else { continue }
            lifted = true
            if request.header(header) == nil { request.headers.append((header, v)) }
        }
        guard lifted else { return }
        request.query.removeAll { $0.0 == "_ApplicationId" || $0.0 == "_SessionToken" }
        request.rawQuery = request.query.map { "\($0.0)=…" }.joined(separator: "&")
    }
}
