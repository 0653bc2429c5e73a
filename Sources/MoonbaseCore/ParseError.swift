/// A Parse error code: a stable number that clients match on (never the text).
///
/// A `RawRepresentable` struct rather than a closed enum (GRDB's `ResultCode`), so a code
/// we do not name yet still round-trips.
public struct ParseErrorCode: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
    public let rawValue: Int
    public init(rawValue: Int) { self.rawValue = rawValue }
    public init(_ rawValue: Int) { self.rawValue = rawValue }

    public static let internalError = ParseErrorCode(1)
    public static let objectNotFound = ParseErrorCode(101)
    public static let invalidQuery = ParseErrorCode(102)
    public static let invalidClassName = ParseErrorCode(103)
    public static let missingObjectId = ParseErrorCode(104)
    public static let invalidKeyName = ParseErrorCode(105)
    public static let invalidPointer = ParseErrorCode(106)
    public static let invalidJSON = ParseErrorCode(107)
    public static let commandUnavailable = ParseErrorCode(108)
    public static let incorrectType = ParseErrorCode(111)
    public static let invalidChannelName = ParseErrorCode(112)
    public static let operationForbidden = ParseErrorCode(119)
    public static let invalidFileName = ParseErrorCode(122)
    public static let invalidACL = ParseErrorCode(123)
    public static let timeout = ParseErrorCode(124)
    public static let fileTooLarge = ParseErrorCode(130)
    public static let duplicateValue = ParseErrorCode(137)
    public static let invalidRoleName = ParseErrorCode(139)
    public static let scriptFailed = ParseErrorCode(141)
    public static let validationError = ParseErrorCode(142)
    public static let fileDeleteError = ParseErrorCode(153)
    public static let requestLimitExceeded = ParseErrorCode(155)
    public static let duplicateRequest = ParseErrorCode(159)
    public static let invalidEventName = ParseErrorCode(160)
    public static let usernameMissing = ParseErrorCode(200)
    public static let passwordMissing = ParseErrorCode(201)
    public static let usernameTaken = ParseErrorCode(202)
    public static let emailTaken = ParseErrorCode(203)
    public static let emailMissing = ParseErrorCode(204)
    public static let emailNotFound = ParseErrorCode(205)
    public static let sessionMissing = ParseErrorCode(206)
    public static let mustCreateUserThroughSignup = ParseErrorCode(207)
    public static let accountAlreadyLinked = ParseErrorCode(208)
    public static let invalidSessionToken = ParseErrorCode(209)

    /// Every named code under the names the Parse SDKs give them (`Parse.Error.OBJECT_NOT_FOUND`),
    /// so Cloud Code can write `cloud.codes.VALIDATION_ERROR` instead of a bare 142.
    public static let named: [(name: String, code: ParseErrorCode)] = [
        ("INTERNAL_SERVER_ERROR", .internalError), ("OBJECT_NOT_FOUND", .objectNotFound),
        ("INVALID_QUERY", .invalidQuery), ("INVALID_CLASS_NAME", .invalidClassName),
        ("MISSING_OBJECT_ID", .missingObjectId), ("INVALID_KEY_NAME", .invalidKeyName),
        ("INVALID_POINTER", .invalidPointer), ("INVALID_JSON", .invalidJSON),
        ("COMMAND_UNAVAILABLE", .commandUnavailable), ("INCORRECT_TYPE", .incorrectType),
        ("INVALID_CHANNEL_NAME", .invalidChannelName), ("OPERATION_FORBIDDEN", .operationForbidden),
        ("INVALID_FILE_NAME", .invalidFileName), ("INVALID_ACL", .invalidACL), ("TIMEOUT", .timeout),
        ("FILE_TOO_LARGE", .fileTooLarge), ("DUPLICATE_VALUE", .duplicateValue),
        ("INVALID_ROLE_NAME", .invalidRoleName), ("SCRIPT_FAILED", .scriptFailed),
        ("VALIDATION_ERROR", .validationError), ("FILE_DELETE_ERROR", .fileDeleteError),
        ("REQUEST_LIMIT_EXCEEDED", .requestLimitExceeded), ("DUPLICATE_REQUEST", .duplicateRequest),
        ("INVALID_EVENT_NAME", .invalidEventName), ("USERNAME_MISSING", .usernameMissing),
        ("PASSWORD_MISSING", .passwordMissing), ("USERNAME_TAKEN", .usernameTaken),
        ("EMAIL_TAKEN", .emailTaken), ("EMAIL_MISSING", .emailMissing), ("EMAIL_NOT_FOUND", .emailNotFound),
        ("SESSION_MISSING", .sessionMissing), ("MUST_CREATE_USER_THROUGH_SIGNUP", .mustCreateUserThroughSignup),
        ("ACCOUNT_ALREADY_LINKED", .accountAlreadyLinked), ("INVALID_SESSION_TOKEN", .invalidSessionToken),
    ]

    /// HTTP status for this code: 101 → 404, 119 → 403, 1 → 500, 155 → 429, else 400.
    public var httpStatus: Int {
        switch rawValue {
        case 101: return 404
        case 119: return 403
        case 1: return 500
        case 155: return 429
        default: return 400
        }
    }

    public var description: String { String(rawValue) }
}

/// The one error type that crosses module edges toward the client.
///
/// `message` is sent to the client; `underlying` is logged and never sent
/// (PocketBase's `ApiError.rawData`). Module errors (SQLite, Lua, cron) are mapped to this at
/// the module edge.
public struct ParseError: Error, Sendable, CustomStringConvertible {
    public var code: ParseErrorCode
    public var message: String
    public var underlying: String?
    /// Extra response headers (e.g. `Retry-After` for 155).
    public var headers: [(String, String)]
    /// Overrides `code.httpStatus` when set (e.g. 413 for a body over the limit).
    public var status: Int?

    public init(_ code: ParseErrorCode, _ message: String, underlying: String? = nil,
                headers: [(String, String)] = [], status: Int? = nil) {
        self.code = code
        self.message = message
        self.underlying = underlying
        self.headers = headers
        self.status = status
    }

    public var httpStatus: Int { status ?? code.httpStatus }
    public var description: String { "ParseError(\(code.rawValue)): \(message)" }

    public static func internalError(_ underlying: String) -> ParseError {
        ParseError(.internalError, "internal error", underlying: underlying)
    }
}
