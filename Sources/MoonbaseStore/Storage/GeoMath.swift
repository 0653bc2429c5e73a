import MoonbaseSQLite

/// Great-circle distance as the store's `$nearSphere`/`$centerSphere` compute it, for matching
/// outside SQL (realtime subscriptions must agree with REST finds to the last bit).
public enum GeoMath {
    /// Haversine distance in radians between two points given in degrees.
    public static func distanceRadians(lat1: Double, lng1: Double, lat2: Double, lng2: Double) -> Double {
        geoDistanceRadians(lat1: lat1, lng1: lng1, lat2: lat2, lng2: lng2)
    }
}
