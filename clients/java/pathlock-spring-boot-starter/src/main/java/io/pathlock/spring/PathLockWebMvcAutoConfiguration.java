package io.pathlock.spring;

import io.pathlock.Busy;
import io.pathlock.PathLocks;
import org.springframework.boot.autoconfigure.AutoConfiguration;
import org.springframework.boot.autoconfigure.EnableAutoConfiguration;
import org.springframework.boot.autoconfigure.condition.ConditionalOnBean;
import org.springframework.boot.autoconfigure.condition.ConditionalOnBooleanProperty;
import org.springframework.boot.autoconfigure.condition.ConditionalOnClass;
import org.springframework.boot.autoconfigure.condition.ConditionalOnMissingBean;
import org.springframework.boot.autoconfigure.condition.ConditionalOnWebApplication;
import org.springframework.context.annotation.Bean;
import org.springframework.http.ProblemDetail;
import org.springframework.web.servlet.DispatcherServlet;

/**
 * {@link EnableAutoConfiguration Auto-configuration} of {@link BusyProblemDetails} in a Spring MVC
 * (servlet) application with a {@link PathLocks} handle (the starter's, or the application's own):
 * {@link Busy} answered 409 with the blockers as problem details. {@code
 * pathlock.mvc.problemdetails.enabled=false} turns it off, as {@code pathlock.enabled=false} and
 * excluding {@link PathLockAutoConfiguration} do.
 */
@AutoConfiguration(after = PathLockAutoConfiguration.class)
@ConditionalOnWebApplication(type = ConditionalOnWebApplication.Type.SERVLET)
@ConditionalOnClass({ Busy.class, PathLocks.class, DispatcherServlet.class, ProblemDetail.class })
@ConditionalOnBean(PathLocks.class)
@ConditionalOnBooleanProperty(name = "pathlock.enabled", matchIfMissing = true)
@ConditionalOnBooleanProperty(name = "pathlock.mvc.problemdetails.enabled", matchIfMissing = true)
public class PathLockWebMvcAutoConfiguration {
    /** Creates the auto-configuration; Spring does. */
    public PathLockWebMvcAutoConfiguration() {
    }

    /**
     * The advice that answers {@link Busy}.
     *
     * @return the advice
     */
    @Bean
    @ConditionalOnMissingBean
    public BusyProblemDetails pathLockBusyProblemDetails() {
        return new BusyProblemDetails();
    }
}
