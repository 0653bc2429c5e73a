import MoonbaseCrypto
import MoonbaseHTTP
import MoonbaseJSON

/// What the official Parse SDKs send that plain REST clients do not, rewritten into the plain
/// REST shape before routing, so every endpoint sees one form:
///
/// - The JavaScript SDK posts every request as `text/plain` (a "simple" request a browser sends
///   without a CORS preflight) with its keys in the body: `_ApplicationId`, `_JavaScriptKey`,
///   `_ClientVersion`, `_SessionToken`, `_MasterKey`, `_InstallationId`, `_RevocableSession`,
///   `_ContentType`. They become the equivalent headers (a header actually sent wins) and leave
///   the body.
/// - `_method` in a POST body overrides the method (`GET`, `PUT`, `DELETE`). The SDKs send long
///   queries as `POST /parse/classes/C` with `{"_method":"GET","where":{…},"limit":…}`; for a GET
///   the remaining body fields become query parameters (objects as JSON text, arrays of strings
///   joined with commas), as Parse Server merges them.
/// - The JavaScript SDK uploads a file as the same envelope with `base64` and `_ContentType`:
///   the body becomes the decoded bytes and `_ContentType` their content type.
/// - `order`, `keys`, `excludeKeys` and `include` may be JSON arrays (`include=["author"]`, what
///   the Swift SDK puts in a URL): they are joined with commas.
///
/// Runs on the I/O thread: the common request (JSON content type, no underscore envelope keys,
/// no bracketed list parameter) costs a few byte comparisons.
enum SDKRequest {
    /// Body keys read as headers (lower-case header names, as `HTTPRequest.headers` holds them).
    static let envelopeHeaders: [(String, String)] = [
        ("_ApplicationId", "x-parse-application-id"),
        ("_JavaScriptKey", "x-parse-javascript-key"),
        ("_ClientVersion", "x-parse-client-version"),
        ("_SessionToken", "x-parse-session-token"),
        ("_MasterKey", "x-parse-master-key"),
        ("_InstallationId", "x-parse-installation-id"),
        ("_RevocableSession", "x-parse-revocable-session"),
        ("_ContentType", "content-type"),
    ]

    /// Parameters Parse Server JSON-parses and joins with commas when they are arrays.
    static let listParameters: Set<String> = ["order", "keys", "excludeKeys", "include"]

    static let overridableMethods: Set<String> = ["GET", "PUT", "DELETE", "POST"]

    static func normalize(_ r: inout HTTPRequest) {
        guard r.path.hasPrefix("/parse/") else { return }
        if r.method == "POST", !r.body.isEmpty {
            if r.path.hasPrefix("/parse/files/") {
                // The JavaScript SDK's upload (`base64`) or delete (`_method: DELETE`).
                if isTextPlain(r), r.body.first == UInt8(ascii: "{"), !unwrapFileUpload(&r), mayCarryEnvelope(r) {
                    unwrapEnvelope(&r, requireMethod: true)
                }
            } else if mayCarryEnvelope(r) {
                unwrapEnvelope(&r)
            }
        }
        if !r.query.isEmpty { joinListParameters(&r.query) }
    }

    static func isTextPlain(_ r: HTTPRequest) -> Bool {
        guard let ct = r.header("content-type"), ct.utf8.count >= 10 else { return false }
        return ct.lowercased().hasPrefix("text/plain")
    }

    /// `{"base64": …, "_ContentType": …, "_ApplicationId": …}` → the decoded bytes. A text file
    /// that merely looks like JSON (no `base64` string, or one that does not decode) is kept as is.
    @discardableResult
    static func unwrapFileUpload(_ r: inout HTTPRequest) -> Bool {
        guard let v = try? JSON.parse(r.body), let o = v.objectValue, let b64 = o["base64"]?.stringValue,
              let bytes = Base64.decode(b64) else { return false }
        for (key, header) in envelopeHeaders where header != "content-type" {
            if let text = o[key]?.stringValue, r.header(header) == nil { r.headers.append((header, text)) }
        }
        r.headers.removeAll { $0.0 == "content-type" }
        r.headers.append(("content-type", o["_ContentType"]?.stringValue ?? "application/octet-stream"))
        r.body = bytes
        return true
    }

    /// A `text/plain` body, or a JSON body holding `"_` followed by a capital letter or `m`
    /// (`"_method"`, `"_ApplicationId"`…; field names never start with `_`, and `"__type"` is
    /// not matched).
    static func mayCarryEnvelope(_ r: HTTPRequest) -> Bool {
        if isTextPlain(r) { return true }
        let b = r.body
        var i = 0
        let n = b.count - 2
        while i < n {
            if b[i] == UInt8(ascii: "\""), b[i + 1] == UInt8(ascii: "_") {
                let c = b[i + 2]
                if (c >= UInt8(ascii: "A") && c <= UInt8(ascii: "Z")) || c == UInt8(ascii: "m") { return true }
            }
            i += 1
        }
        return false
    }

    /// - Parameter requireMethod: only a body with `_method` is an envelope (a file upload path,
    ///   where any other body is the file itself).
    static func unwrapEnvelope(_ r: inout HTTPRequest, requireMethod: Bool = false) {
        guard let v = try? JSON.parse(r.body), var body = v.objectValue else { return }
        if requireMethod && body["_method"] == nil { return }
        var changed = false
        for (key, header) in envelopeHeaders {
            guard let value = body.removeValue(forKey: key) else { continue }
            changed = true
            guard let text = value.stringValue ?? (value.isNumber || value.boolValue != nil ? value.jsonString : nil)
            else { continue }
            if header == "content-type" {
                r.headers.removeAll { $0.0 == "content-type" }
                r.headers.append((header, text))
            } else if r.header(header) == nil {
                r.headers.append((header, text))
            }
        }
        var method = r.method
        if let m = body.removeValue(forKey: "_method") {
            changed = true
            if let s = m.stringValue?.uppercased(), overridableMethods.contains(s) { method = s }
        }
        guard changed else { return }
        r.method = method
        if method == "GET" {
            // Query parameters given in the URL win over the same ones in the body.
            for e in body.entries where !r.query.contains(where: { $0.0 == e.key }) {
                r.query.append((e.key, parameterText(e.value)))
            }
            r.body = []
        } else {
            r.body = body.isEmpty ? [] : JSON.encode(.object(body))
            // What is left is JSON, whatever type the browser had to claim.
            if r.header("content-type").map({ $0.lowercased().hasPrefix("text/plain") }) ?? true {
                r.headers.removeAll { $0.0 == "content-type" }
                r.headers.append(("content-type", HTTPResponse.jsonContentType))
            }
        }
    }

    /// A body value as a query parameter: strings as they are, arrays of strings joined with
    /// commas, anything else as JSON text.
    static func parameterText(_ v: JSONValue) -> String {
        if let s = v.stringValue { return s }
        if let a = v.arrayValue {
            let strings = a.compactMap(\.stringValue)
            if strings.count == a.count { return strings.joined(separator: ",") }
        }
        return v.jsonString
    }

    static func joinListParameters(_ query: inout [(String, String)]) {
        for i in query.indices where listParameters.contains(query[i].0) && query[i].1.utf8.first == UInt8(ascii: "[") {
            guard let a = (try? JSON.parse(query[i].1))?.arrayValue else { continue }
            let strings = a.compactMap(\.stringValue)
            if strings.count == a.count { query[i].1 = strings.joined(separator: ",") }
        }
    }
}
