package io.pathlock.spring;

import io.pathlock.Busy;
import org.springframework.boot.autoconfigure.AutoConfiguration;
import org.springframework.boot.autoconfigure.EnableAutoConfiguration;
import org.springframework.boot.autoconfigure.condition.ConditionalOnBooleanProperty;
import org.springframework.boot.autoconfigure.condition.ConditionalOnClass;
import org.springframework.boot.autoconfigure.condition.ConditionalOnMissingBean;
import org.springframework.boot.autoconfigure.condition.ConditionalOnWebApplication;
import org.springframework.context.annotation.Bean;
import org.springframework.http.ProblemDetail;
import org.springframework.web.servlet.DispatcherServlet;

/**
 * {@link EnableAutoConfiguration Auto-configuration} of {@link BusyProblemDetails} in a Spring MVC
 * (servlet) application: {@link Busy} answered 409 with the blockers as problem details. {@code
 * pathlock.mvc.problemdetails.enabled=false} turns it off.
 */
@AutoConfiguration
@ConditionalOnWebApplication(type = ConditionalOnWebApplication.Type.SERVLET)
@ConditionalOnClass({ Busy.class, DispatcherServlet.class, ProblemDetail.class })
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
