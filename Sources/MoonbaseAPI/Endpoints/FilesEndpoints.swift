import MoonbaseCore
import MoonbaseHTTP
import MoonbaseJSON

/// `/parse/files`: upload (app id), download (no headers), delete (master key).
enum FilesEndpoints {
    static func routes(_ s: Services) -> [(String, String, Endpoint)] {
        [
            ("POST", "/parse/files/:name", Endpoint("files.create", access: .app) { req throws(ParseError) in
                let type = req.http.header("content-type") ?? "application/octet-stream"
                let stored = try s.files.save(name: req.param("name"), contentType: type, bytes: req.http.body)
                let url = fileURL(s, req, stored)
                var w = JSONWriter()
                w.write(.object(["url": .string(url), "name": .string(stored)]))
                return .json(201, w.bytes, headers: [("Location", url)])
            }),
            ("GET", "/parse/files/:app/:name", Endpoint("files.get", access: .open) { req throws(ParseError) in
                guard req.param("app") == s.config.appId else { throw ParseError(.objectNotFound, "File not found.") }
                let (body, type) = try s.files.open(req.param("name"))
                return .file(200, body, contentType: type, headers: servedHeaders(contentType: type))
            }),
            ("DELETE", "/parse/files/:name", Endpoint("files.delete", access: .master) { req throws(ParseError) in
                guard try s.files.delete(req.param("name")) else { throw ParseError(.objectNotFound, "File not found.") }
                return .json(200, Array("{}".utf8))
            }),
        ]
    }

    /// Uploaded files are served from the API's origin: the browser must not sniff a type of
    /// its own, and anything but a raster image (HTML, SVG, PDF, unknown bytes) is sandboxed so a
    /// file cannot run script as the API's origin.
    static func servedHeaders(contentType: String) -> [(String, String)] {
        var h = [("X-Content-Type-Options", "nosniff")]
        let base = contentType.split(separator: ";").first.map { String($0).trimmingWhitespace().lowercased() } ?? ""
        if !rasterImageTypes.contains(base) { h.append(("Content-Security-Policy", "sandbox")) }
        return h
    }

    static let rasterImageTypes: Set<String> = ["image/png", "image/jpeg", "image/gif", "image/webp"]

    static func fileURL(_ s: Services, _ req: APIRequest, _ stored: String) -> String {
        s.baseURL(req) + "/parse/files/\(s.config.appId)/\(stored)"
    }
}
