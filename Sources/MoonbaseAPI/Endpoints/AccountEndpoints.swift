import MoonbaseAuth
import MoonbaseCore
import MoonbaseHTTP
import MoonbaseJSON
import MoonbaseLua
import MoonbaseStore

/// Parse Config, password reset and email verification: the REST endpoints and the host's two
/// HTML pages (`/apps/APP_ID/request_password_reset` and `/apps/APP_ID/verify_email`, as Parse
/// Server names them). A page's GET only shows a form; only its POST uses the token, so a link
/// scanner that fetches the link cannot spend it.
enum AccountEndpoints {
    static func routes(_ s: Services) -> [(String, String, Endpoint)] {
        [
            ("GET", "/parse/config", Endpoint("config.get", access: .app) { req throws(ParseError) in
                var body: JSONObject = ["params": .object(try s.parseConfig.params(master: req.isMaster))]
                if req.isMaster { body["masterKeyOnly"] = .object(try s.parseConfig.masterKeyOnly()) }
                return .json(200, JSON.encode(.object(body)), headers: [("Cache-Control", "no-store")])
            }),
            ("PUT", "/parse/config", Endpoint("config.update", access: .master) { req throws(ParseError) in
                let b = try req.jsonBody()
                func table(_ k: String) throws(ParseError) -> JSONObject {
                    guard let v = b[k], !v.isNull else { return [:] }
                    guard let o = v.objectValue else { throw ParseError(.invalidJSON, "\(k) must be an object") }
                    return o
                }
                try s.parseConfig.update(params: try table("params"), masterKeyOnly: try table("masterKeyOnly"))
                return .json(200, Array(#"{"result":true}"#.utf8))
            }),
            ("POST", "/parse/requestPasswordReset", Endpoint("users.requestPasswordReset", access: .app) { req throws(ParseError) in
                try s.requestAccountMail(.passwordReset, req)
            }),
            ("POST", "/parse/verificationEmailRequest", Endpoint("users.verificationEmailRequest", access: .app) { req throws(ParseError) in
                try s.requestAccountMail(.verifyEmail, req)
            }),
            ("GET", "/apps/:appId/request_password_reset", Endpoint("pages.passwordReset", access: .open) { req throws(ParseError) in
                s.accountPage(.passwordReset, req, post: false)
            }),
            ("POST", "/apps/:appId/request_password_reset", Endpoint("pages.passwordReset", access: .open) { req throws(ParseError) in
                s.accountPage(.passwordReset, req, post: true)
            }),
            ("GET", "/apps/:appId/verify_email", Endpoint("pages.verifyEmail", access: .open) { req throws(ParseError) in
                s.accountPage(.verifyEmail, req, post: false)
            }),
            ("POST", "/apps/:appId/verify_email", Endpoint("pages.verifyEmail", access: .open) { req throws(ParseError) in
                s.accountPage(.verifyEmail, req, post: true)
            }),
        ]
    }
}

extension Services {
    /// The base of links in mails: `--public-url`, else the listen address — never the request's
    /// Host header, which the requester controls.
    var mailBaseURL: String {
        if let u = config.publicURL { return u.hasSuffix("/") ? String(u.dropLast()) : u }
        return "http://\(config.host):\(config.port)"
    }

    /// `POST /parse/requestPasswordReset` and `/parse/verificationEmailRequest`: `{}` for every
    /// well-formed request, known address or not, in the same time; the lookup and the mail
    /// happen afterwards on the mail thread.
    func requestAccountMail(_ kind: AccountMailService.Kind, _ req: APIRequest) throws(ParseError) -> HTTPResponse {
        let b = try req.jsonBody()
        guard let email = b["email"]?.stringValue, !email.isEmpty, email.utf8.count <= 254 else {
            throw ParseError(.emailMissing, "you must provide an email")
        }
        guard cloud.registry.emailHook != nil else { throw ParseError(.internalError, "email delivery is not configured") }
        try accountMail.admit(email: email, ip: req.http.remoteAddress)
        accountMail.enqueue { [self] in self.deliverAccountMail(kind, email: email) }
        return .json(200, Array("{}".utf8))
    }

    /// Sends a verification mail to a user who just signed up or changed their email, when a
    /// mail hook exists.
    func sendVerificationIfConfigured(email: String?) {
        guard let email, cloud.registry.emailHook != nil else { return }
        accountMail.enqueue { [self] in self.deliverAccountMail(.verifyEmail, email: email) }
    }

    /// On the mail thread: finds the user, issues a token and runs `cloud.sendEmail`.
    func deliverAccountMail(_ kind: AccountMailService.Kind, email: String) {
        do throws(ParseError) {
            guard let user = try auth.user(withEmail: email), let id = user["objectId"]?.stringValue,
                  let address = user["email"]?.stringValue else { return }
            if kind == .verifyEmail && user["emailVerified"]?.boolValue == true { return }
            let token = try accountMail.issue(kind, userId: id, email: address)
            let link = mailBaseURL + "/apps/\(Services.urlEncode(config.appId))/\(kind.page)?token=\(token)"
            let username = user["username"]?.stringValue ?? address
            let subject = kind == .passwordReset ? "Reset your password" : "Verify your email"
            let text = kind == .passwordReset
                ? "Hi \(username),\n\nSomeone asked to reset the password of your account. To choose a new password, open:\n\n\(link)\n\nThe link works once, within 1 hour. If you did not ask, ignore this mail.\n"
                : "Hi \(username),\n\nPlease confirm your email address by opening:\n\n\(link)\n\nThe link works once, within 24 hours.\n"
            let message: JSONObject = ["to": .string(address), "subject": .string(subject), "text": .string(text),
                                       "link": .string(link), "kind": .string(kind.rawValue), "username": .string(username)]
            _ = try cloud.sendEmail(message)
        } catch {
            Log.warn("\(kind.rawValue) mail not sent: \(error.message)")
        }
    }

    // MARK: pages

    func accountPage(_ kind: AccountMailService.Kind, _ req: APIRequest, post: Bool) -> HTTPResponse {
        guard req.param("appId") == config.appId else { return Services.page(404, "Not found", "<p>No such page.</p>") }
        let form = (try? UsersEndpoints.form(req)) ?? [:]
        let token = post ? (form["token"] ?? "") : (req.http.queryValue("token") ?? "")
        let invalid = Services.page(400, "Link expired",
                                    "<p>This link is invalid, was already used or has expired. Ask for a new one from the app.</p>")
        let action = kind.page
        let hidden = "<input type=\"hidden\" name=\"token\" value=\"\(Services.html(token))\">"
        if !post {
            guard accountMail.isValid(kind, token: token) else { return invalid }
            if kind == .passwordReset {
                return Services.page(200, "Choose a new password", """
                    <form method="post" action="\(action)">\(hidden)
                    <p><label>New password <input type="password" name="new_password" autocomplete="new-password" required></label></p>
                    <p><button type="submit">Set password</button></p></form>
                    """)
            }
            return Services.page(200, "Verify your email", """
                <form method="post" action="\(action)">\(hidden)
                <p><button type="submit">Confirm my email address</button></p></form>
                """)
        }
        do throws(ParseError) {
            if kind == .passwordReset {
                guard let password = form["new_password"], !password.isEmpty, password.utf8.count <= 1024 else {
                    guard accountMail.isValid(kind, token: token) else { return invalid }
                    return Services.page(400, "Choose a new password", """
                        <p>The password must not be empty.</p>
                        <form method="post" action="\(action)">\(hidden)
                        <p><label>New password <input type="password" name="new_password" autocomplete="new-password" required></label></p>
                        <p><button type="submit">Set password</button></p></form>
                        """)
                }
                guard let used = try accountMail.consume(kind, token: token) else {
                    return invalid
                }
                _ = try updateUser(used.userId, ["password": .string(password)], caller: CallerContext(identity: .master),
                                   sessionId: nil)
                auth.clearSessionCache()
                return Services.page(200, "Password changed", "<p>Your password was changed. You can log in with it now.</p>")
            }
            guard let used = try accountMail.consume(kind, token: token),
                  let user = try auth.user(withEmail: used.email), user["objectId"]?.stringValue == used.userId else {
                return invalid
            }
            _ = try updateUser(used.userId, ["emailVerified": .bool(true)], caller: CallerContext(identity: .master), sessionId: nil)
            return Services.page(200, "Email verified", "<p>Thank you: your email address is verified.</p>")
        } catch {
            Log.warn("\(kind.rawValue) page: \(error.message)")
            return Services.page(500, "Something went wrong", "<p>Something went wrong. Please try again later.</p>")
        }
    }

    /// A plain HTML page: no script at all, nothing loaded from elsewhere, not cacheable, never
    /// framed, and no Referer (the URL may carry a token).
    static func page(_ status: Int, _ title: String, _ body: String) -> HTTPResponse {
        let doc = """
            <!doctype html><html lang="en"><head><meta charset="utf-8">
            <meta name="viewport" content="width=device-width, initial-scale=1"><title>\(html(title))</title>
            <style>body{font-family:sans-serif;max-width:30em;margin:3em auto;padding:0 1em}</style></head>
            <body><h1>\(html(title))</h1>\(body)</body></html>
            """
        return .text(status, doc, contentType: "text/html; charset=utf-8", headers: [
            ("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"),
            ("Referrer-Policy", "no-referrer"),
            ("X-Frame-Options", "DENY"),
            ("X-Content-Type-Options", "nosniff"),
            ("Cache-Control", "no-store"),
        ])
    }

    static func html(_ s: String) -> String {
        var out = ""
        for c in s {
            switch c {
            case "&": out += "&amp;"
            case "<": out += "&lt;"
            case ">": out += "&gt;"
            case "\"": out += "&quot;"
            case "'": out += "&#39;"
            default: out.append(c)
            }
        }
        return out
    }

    static func urlEncode(_ s: String) -> String {
        let hex = Array("0123456789ABCDEF".utf8)
        var out: [UInt8] = []
        for b in s.utf8 {
            if (b >= 48 && b <= 57) || (b >= 65 && b <= 90) || (b >= 97 && b <= 122) || b == 45 || b == 46 || b == 95 || b == 126 {
                out.append(b)
            } else {
                out += [37, hex[Int(b >> 4)], hex[Int(b & 15)]]
            }
        }
        return String(decoding: out, as: UTF8.self)
    }
}
