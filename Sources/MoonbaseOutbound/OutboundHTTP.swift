import CCurl

#if canImport(Glibc)
import Glibc
#endif

/// One outbound HTTP request (Cloud Code's `http.request`).
public struct OutboundRequest: Sendable {
    public var method: String
    public var url: String
    public var headers: [(String, String)]
    public var body: [UInt8]?
    /// Time for the whole exchange, redirects included.
    public var timeoutMs: Int64

    public init(method: String, url: String, headers: [(String, String)] = [], body: [UInt8]? = nil, timeoutMs: Int64) {
        self.method = method
        self.url = url
        self.headers = headers
        self.body = body
        self.timeoutMs = timeoutMs
    }
}

public struct OutboundResponse: Sendable {
    public var status: Int
    /// Lower-cased names, in the order received (of the last hop).
    public var headers: [(String, String)]
    public var body: [UInt8]
}

/// Why an outbound request failed. Every case is the request's own failure; the caller decides
/// whether its own limits (the call's wall time) were the cause.
public enum OutboundFailure: Error, Sendable {
    /// Refused before any byte was sent: a bad URL, scheme or header, or an address the policy
    /// refuses (the message says which and why).
    case refused(String)
    /// DNS, connect, TLS, protocol errors, the request's timeout, too many redirects.
    case transport(String)
    /// The response body passed the size cap.
    case tooLarge(Int)
    /// `shouldAbort` said stop (the calling script was killed).
    case aborted

    public var message: String {
        switch self {
        case .refused(let m), .transport(let m): return m
        case .tooLarge(let n): return "the response is larger than \(n) bytes"
        case .aborted: return "aborted"
        }
    }
}

/// Outbound HTTP over libcurl, for one request at a time on the calling thread.
///
/// What it enforces: `http` and `https` only; TLS verified (peer and host name); proxy variables
/// of the environment ignored; redirects followed by hand, at most `maxRedirects`, each hop
/// re-checked (scheme, address) and `Authorization`/`Cookie` dropped when the origin changes;
/// the address guard runs in the socket-open callback, on the address actually connected to,
/// so a name that resolves (or re-resolves) to a refused address cannot pass; the body is capped
/// at `maxBytes`; `shouldAbort` is polled while the transfer runs.
///
/// Thread-safety: stateless; each call uses its own curl handle.
public enum OutboundHTTP {
    static let initialized: Bool = curl_global_init(Int(CURL_GLOBAL_DEFAULT)) == CURLE_OK

    public static let defaultMaxRedirects = 5
    public static let defaultMaxBytes = 10 << 20

    public static func perform(_ request: OutboundRequest, policy: AddressPolicy,
                               maxRedirects: Int = defaultMaxRedirects, maxBytes: Int = defaultMaxBytes,
                               shouldAbort: @escaping () -> Bool) throws(OutboundFailure) -> OutboundResponse {
        guard initialized else { throw .transport("libcurl failed to initialise") }
        for (name, value) in request.headers {
            guard !name.isEmpty, name.utf8.allSatisfy({ $0 > 32 && $0 < 127 && $0 != 58 }) else {
                throw .refused("invalid header name '\(name)'")
            }
            guard !value.utf8.contains(where: { $0 == 13 || $0 == 10 || $0 == 0 }) else {
                throw .refused("header \(name) contains CR, LF or NUL")
            }
        }
        let deadline = monotonicMillis() + max(1, request.timeoutMs)
        var hop = request
        var redirects = 0
        while true {
            let (response, location) = try once(hop, policy: policy, maxBytes: maxBytes, deadline: deadline,
                                                shouldAbort: shouldAbort)
            guard let location, [301, 302, 303, 307, 308].contains(response.status) else { return response }
            guard redirects < maxRedirects else { throw .transport("too many redirects (more than \(maxRedirects))") }
            redirects += 1
            if origin(location) != origin(hop.url) {
                hop.headers.removeAll { ["authorization", "cookie", "proxy-authorization"].contains($0.0.lowercased()) }
            }
            if response.status == 303 || ((response.status == 301 || response.status == 302) && hop.method == "POST") {
                if hop.method != "HEAD" { hop.method = "GET" }
                hop.body = nil
                hop.headers.removeAll { ["content-type", "content-length"].contains($0.0.lowercased()) }
            }
            hop.url = location
        }
    }

    /// `scheme://authority` in lower case, or "" when the URL has none.
    static func origin(_ url: String) -> String {
        guard let r = url.firstRange(of: "://") else { return "" }
        let rest = url[r.upperBound...]
        let end = rest.firstIndex(where: { $0 == "/" || $0 == "?" || $0 == "#" }) ?? rest.endIndex
        return (url[..<r.lowerBound] + "://" + rest[..<end]).lowercased()
    }

    static func checkURL(_ url: String) throws(OutboundFailure) {
        let lower = url.lowercased()
        guard lower.hasPrefix("http://") || lower.hasPrefix("https://") else {
            throw .refused("only http and https URLs are allowed: \(url.prefix(100))")
        }
        guard url.utf8.count <= 8192, !url.utf8.contains(where: { $0 <= 32 || $0 == 127 }) else {
            throw .refused("invalid URL")
        }
    }

    static func once(_ r: OutboundRequest, policy: AddressPolicy, maxBytes: Int, deadline: Int64,
                     shouldAbort: @escaping () -> Bool) throws(OutboundFailure) -> (OutboundResponse, String?) {
        try checkURL(r.url)
        let remaining = deadline - monotonicMillis()
        guard remaining > 0 else { throw .transport("timed out") }
        guard let h = curl_easy_init() else { throw .transport("libcurl: cannot create a handle") }
        defer { curl_easy_cleanup(h) }
        let t = Transfer(policy: policy, maxBytes: maxBytes, shouldAbort: shouldAbort)
        let box = Unmanaged.passUnretained(t).toOpaque()
        let errbuf = UnsafeMutablePointer<CChar>.allocate(capacity: Int(CURL_ERROR_SIZE) + 1)
        errbuf.initialize(repeating: 0, count: Int(CURL_ERROR_SIZE) + 1)
        defer { errbuf.deallocate() }
        var headerList: UnsafeMutablePointer<curl_slist>?
        defer { curl_slist_free_all(headerList) }

        var ok = true
        func set(_ rc: CURLcode) { if rc != CURLE_OK { ok = false } }
        set(mb_curl_set_str(h, CURLOPT_URL, r.url))
        set(mb_curl_set_long(h, CURLOPT_NOSIGNAL, 1))
        set(mb_curl_set_str(h, CURLOPT_PROXY, ""))
        set(mb_curl_set_str(h, CURLOPT_PROTOCOLS_STR, "http,https"))
        set(mb_curl_set_long(h, CURLOPT_FOLLOWLOCATION, 0))
        set(mb_curl_set_long(h, CURLOPT_SSL_VERIFYPEER, 1))
        set(mb_curl_set_long(h, CURLOPT_SSL_VERIFYHOST, 2))
        set(mb_curl_set_long(h, CURLOPT_TIMEOUT_MS, Int(remaining)))
        set(mb_curl_set_str(h, CURLOPT_ACCEPT_ENCODING, ""))
        set(mb_curl_set_str(h, CURLOPT_USERAGENT, "moonbase"))
        set(mb_curl_set_off(h, CURLOPT_MAXFILESIZE_LARGE, curl_off_t(maxBytes)))
        set(mb_curl_set_ptr(h, CURLOPT_ERRORBUFFER, errbuf))
        set(mb_curl_set_write(h, writeCallback))
        set(mb_curl_set_ptr(h, CURLOPT_WRITEDATA, box))
        set(mb_curl_set_header(h, headerCallback))
        set(mb_curl_set_ptr(h, CURLOPT_HEADERDATA, box))
        set(mb_curl_set_xferinfo(h, progressCallback))
        set(mb_curl_set_ptr(h, CURLOPT_XFERINFODATA, box))
        set(mb_curl_set_long(h, CURLOPT_NOPROGRESS, 0))
        set(mb_curl_set_opensocket(h, openSocketCallback))
        set(mb_curl_set_ptr(h, CURLOPT_OPENSOCKETDATA, box))
        let method = r.method.uppercased()
        switch method {
        case "GET": set(mb_curl_set_long(h, CURLOPT_HTTPGET, 1))
        case "HEAD": set(mb_curl_set_long(h, CURLOPT_NOBODY, 1))
        case "POST": set(mb_curl_set_long(h, CURLOPT_POST, 1))
        default: set(mb_curl_set_str(h, CURLOPT_CUSTOMREQUEST, method))
        }
        if let body = r.body ?? (method == "POST" ? [] : nil) {
            set(mb_curl_set_off(h, CURLOPT_POSTFIELDSIZE_LARGE, curl_off_t(body.count)))
            body.withUnsafeBytes { b in
                set(mb_curl_set_ptr(h, CURLOPT_COPYPOSTFIELDS, UnsafeMutableRawPointer(mutating: b.baseAddress ?? UnsafeRawPointer(errbuf))))
            }
            if method == "GET" { set(mb_curl_set_str(h, CURLOPT_CUSTOMREQUEST, "GET")) }
        }
        for (name, value) in r.headers {
            headerList = curl_slist_append(headerList, value.isEmpty ? "\(name);" : "\(name): \(value)")
        }
        headerList = curl_slist_append(headerList, "Expect:")
        set(mb_curl_set_slist(h, CURLOPT_HTTPHEADER, headerList))
        guard ok else { throw .transport("libcurl refused an option") }

        let rc = curl_easy_perform(h)
        if t.aborted { throw .aborted }
        if let reason = t.refusedReason { throw .refused(reason) }
        if t.tooLarge || rc == CURLE_FILESIZE_EXCEEDED { throw .tooLarge(maxBytes) }
        guard rc == CURLE_OK else {
            let detail = String(cString: errbuf)
            let text = detail.isEmpty ? String(cString: curl_easy_strerror(rc)) : detail
            throw .transport(rc == CURLE_OPERATION_TIMEDOUT ? "timed out (\(text))" : text)
        }
        var status = 0
        set(mb_curl_get_long(h, CURLINFO_RESPONSE_CODE, &status))
        var location: String?
        var p: UnsafeMutablePointer<CChar>?
        if mb_curl_get_str(h, CURLINFO_REDIRECT_URL, &p) == CURLE_OK, let p { location = String(cString: p) }
        return (OutboundResponse(status: status, headers: t.headers, body: t.body), location)
    }
}

/// State of one transfer, shared with the C callbacks through an unretained pointer (the
/// transfer outlives `curl_easy_perform`, which is the only time callbacks run).
final class Transfer {
    let policy: AddressPolicy
    let maxBytes: Int
    let shouldAbort: () -> Bool
    var body: [UInt8] = []
    var headers: [(String, String)] = []
    var tooLarge = false
    var aborted = false
    var refusedReason: String?

    init(policy: AddressPolicy, maxBytes: Int, shouldAbort: @escaping () -> Bool) {
        self.policy = policy
        self.maxBytes = maxBytes
        self.shouldAbort = shouldAbort
    }
}

private func transfer(_ p: UnsafeMutableRawPointer?) -> Transfer {
    Unmanaged<Transfer>.fromOpaque(p!).takeUnretainedValue()
}

private let writeCallback: mb_curl_data_fn = { data, size, count, ud in
    let t = transfer(ud)
    let n = size * count
    if t.body.count + n > t.maxBytes {
        t.tooLarge = true
        return 0
    }
    if n > 0, let data { t.body.append(contentsOf: UnsafeRawBufferPointer(start: data, count: n)) }
    return n
}

private let headerCallback: mb_curl_data_fn = { data, size, count, ud in
    let t = transfer(ud)
    let n = size * count
    guard let data, n > 0 else { return n }
    var raw = UnsafeRawBufferPointer(start: data, count: n)[...]
    while let last = raw.last, last == 10 || last == 13 { raw = raw.dropLast() }   // bytes: "\r\n" is one Character
    let line = String(decoding: raw, as: UTF8.self)
    if line.hasPrefix("HTTP/") {
        t.headers = []   // a new response (after 100 Continue, or a new hop)
    } else if let colon = line.firstIndex(of: ":") {
        let name = line[..<colon].lowercased()
        var value = line[line.index(after: colon)...]
        while value.first == " " || value.first == "\t" { value = value.dropFirst() }
        t.headers.append((name, String(value)))
    }
    return n
}

private let progressCallback: curl_xferinfo_callback = { ud, _, _, _, _ in
    let t = transfer(ud)
    if t.shouldAbort() {
        t.aborted = true
        return 1
    }
    return 0
}

private let openSocketCallback: curl_opensocket_callback = { ud, _, addr in
    let t = transfer(ud)
    guard let addr else { return mb_curl_socket_bad() }
    let family = addr.pointee.family
    var bytes: [UInt8] = []
    withUnsafePointer(to: &addr.pointee.addr) { sa in
        if family == AF_INET {
            sa.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { sin in
                var a = sin.pointee.sin_addr
                bytes = withUnsafeBytes(of: &a) { Array($0) }
            }
        } else if family == AF_INET6 {
            sa.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { sin6 in
                var a = sin6.pointee.sin6_addr
                bytes = withUnsafeBytes(of: &a) { Array($0) }
            }
        }
    }
    guard !bytes.isEmpty else {
        t.refusedReason = "refused to connect: not an IP address"
        return mb_curl_socket_bad()
    }
    if let why = t.policy.refusal(bytes) {
        t.refusedReason = "refused to connect to \(AddressPolicy.format(bytes)) (\(why) address); "
            + "MOONBASE_HTTP_ALLOW lists the addresses that may be reached"
        return mb_curl_socket_bad()
    }
    let fd = socket(family, addr.pointee.socktype, addr.pointee.protocol)
    if fd >= 0 { _ = fcntl(fd, F_SETFD, FD_CLOEXEC) }
    return fd
}

func monotonicMillis() -> Int64 {
    var ts = timespec()
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return Int64(ts.tv_sec) * 1000 + Int64(ts.tv_nsec) / 1_000_000
}
