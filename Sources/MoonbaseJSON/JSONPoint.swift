import CJSON

/// The point of a GeoPoint member of a stored object: the numbers
/// `json_extract(json, '$.key.latitude')` and `'$.key.longitude'` give, read in one pass over
/// the text (`cj_point`: no parse into values, no validation — for documents our serializer
/// wrote). The SQLite layer's geo functions call it once per row a geo query reads.
public enum JSONPoint {
    /// nil when the member, or either coordinate, is missing or not a number.
    public static func read(_ json: UnsafePointer<UInt8>, count: Int, key: UnsafePointer<UInt8>, keyCount: Int)
        -> (latitude: Double, longitude: Double)? {
        var lat = 0.0, lng = 0.0
        guard cj_point(json, count, key, keyCount, &lat, &lng) == 1 else { return nil }
        return (lat, lng)
    }
}
