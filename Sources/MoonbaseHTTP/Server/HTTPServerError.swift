/// A server lifecycle failure (bind, thread creation): not a request error.
public struct HTTPServerError: Error, Sendable, CustomStringConvertible {
    public var message: String
    public init(_ message: String) { self.message = message }
    public var description: String { "HTTPServerError: \(message)" }
}
