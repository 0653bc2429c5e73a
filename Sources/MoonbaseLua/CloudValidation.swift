import MoonbaseCore
import MoonbaseJSON

/// Parse's function validators: `requireUser`, `requireMaster`, `validateMasterKey`, `fields`.
/// A failure answers 142 before the function runs.
enum CloudValidation {
    /// Checks the caller and params; returns the params with field defaults applied.
    static func validate(_ o: CloudFunctionOptions, params: JSONObject, request: CloudRequest) throws(ParseError) -> JSONObject {
        if request.identity.isMaster && !o.validateMasterKey { return params }
        if o.requireMaster && !request.identity.isMaster {
            throw ParseError(.validationError, "Validation failed. Master key is required to complete this request.")
        }
        // Reached by a master call only with validateMasterKey: then it needs a user like any other.
        if o.requireUser && request.identity.userId == nil {
            throw ParseError(.validationError, "login required")
        }
        var p = params
        for rule in o.fields {
            guard let v = p[rule.name], !v.isNull else {
                if let d = rule.defaultValue { p[rule.name] = d; continue }
                if rule.required {
                    throw ParseError(.validationError, "Validation failed. Please specify data for \(rule.name).")
                }
                continue
            }
            if let t = rule.type, !matches(v, t) {
                throw ParseError(.validationError, "Validation failed. Invalid type for \(rule.name). Expected: \(t)")
            }
            if let opts = rule.options, !opts.contains(v) {
                throw ParseError(.validationError, "Validation failed. Invalid option for \(rule.name). Expected: \(opts.map(\.jsonString).joined(separator: ", "))")
            }
        }
        return p
    }

    static func matches(_ v: JSONValue, _ type: String) -> Bool {
        switch type {
        case "string": return v.stringValue != nil
        case "number": return v.isNumber
        case "boolean": return v.boolValue != nil
        case "array": return v.arrayValue != nil
        case "date": return v.parseType == "Date" || (v.stringValue.map { ISO8601.parse($0) != nil } ?? false)
        case "object": return v.objectValue != nil
        default: return true
        }
    }
}
